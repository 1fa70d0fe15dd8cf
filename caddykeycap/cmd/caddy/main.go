// Command caddy is Caddy with the standard modules and keycap's: the main
// package xcaddy generates for
//
//	xcaddy build --with github.com/keycap/keycap/caddykeycap
//
// Copy it into a module of your own to build the same binary with go build.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	// plug in Caddy modules here
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/keycap/keycap/caddykeycap"
)

func main() {
	caddycmd.Main()
}
