// Command keycap is the keycap gateway: a reverse proxy that caps the HTTP
// requests in flight per key and the Pusher-protocol WebSocket connections
// per user, in front of an application in any language.
//
//	keycap -config keycap.yaml         serve (SIGHUP reloads the file, SIGTERM drains and stops)
//	keycap check -config keycap.yaml   validate the file and exit
//	keycap demo [-listen addr]         run the demo upstream alone
//	keycap try [-url url]              a greedy client and two polite ones, against a gateway
//	keycap inspect [-json]             what a gateway's admin page shows: slots, keys, waiters, refusals
//	keycap override set|reset|list     change one key's max or share on every gateway, live
//	keycap help                        list the commands
//
// docs/gateway.md is the configuration reference.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
)

const usage = `keycap: a gateway that caps requests in flight per key and WebSockets per user.

Usage:
  keycap [serve] -config FILE   serve the gateway (SIGHUP reloads FILE, SIGTERM drains and stops)
  keycap check -config FILE     validate FILE, listing every problem with its line, and exit
  keycap demo [-listen ADDR]    run the demo upstream alone (default 127.0.0.1:8081)
  keycap try [-url URL]         send a greedy client and two polite ones to a gateway
  keycap inspect [-json]        print what the gateway's admin page shows (needs admin_api.token)
  keycap override set|reset|list  change one key's max or share on every gateway, live
  keycap help                   this list

Try it:  keycap -config examples/gateway.yaml, then keycap try in another terminal.
The configuration reference is docs/gateway.md.
`

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	if cmd == "help" || (cmd == "serve" && len(args) > 0 && isHelp(args[0])) {
		fmt.Print(usage)
		return
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(args)
	case "check":
		err = check(args)
	case "demo":
		err = demo(args)
	case "try":
		err = try(args)
	case "inspect":
		err = inspect(args)
	case "override":
		err = override(args)
	default:
		fmt.Fprintf(os.Stderr, "keycap: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keycap:", err)
		os.Exit(1)
	}
}

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func configFlag(name string, args []string) (string, error) {
	flags := flag.NewFlagSet(name, flag.ContinueOnError)
	file := flags.String("config", "keycap.yaml", "configuration file")
	if err := flags.Parse(args); err != nil {
		return "", err
	}
	if flags.NArg() > 0 {
		return "", fmt.Errorf("%s: unexpected argument %q (keycap help lists the commands)", name, flags.Arg(0))
	}
	if _, err := os.Stat(*file); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no configuration file %s: give one with -config FILE (examples/gateway.yaml to try it; docs/gateway.md describes them; keycap help lists the commands)", *file)
	}
	return *file, nil
}

func serve(args []string) error {
	file, err := configFlag("serve", args)
	if err != nil {
		return err
	}
	// Before Start, so that a signal that arrives once the listeners are up
	// (and logged) is handled, not the process killed by it.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	s, err := gateway.Start(file)
	if err != nil {
		return err
	}
	redis.SetLogger(gateway.RedisLogger(s.Logger())) // the binary's own global, not the package's
	for got := range sig {
		if got == syscall.SIGHUP {
			_ = s.Reload() // a bad file keeps the old configuration; the log says why
			continue
		}
		return s.Shutdown()
	}
	return nil
}

func check(args []string) error {
	file, err := configFlag("check", args)
	if err != nil {
		return err
	}
	cfg, err := gateway.LoadConfig(file)
	if err != nil {
		return err
	}
	if err := gateway.Check(cfg); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	fmt.Printf("%s: configuration OK (%d routes, pusher: %v)\n", file, len(cfg.Routes), cfg.Pusher != nil)
	return nil
}

func demo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	addr := fs.String("listen", "127.0.0.1:8081", "address to serve the demo upstream on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "keycap demo upstream on http://%s\n", *addr)
	return http.ListenAndServe(*addr, gateway.Demo())
}

func try(args []string) error {
	fs := flag.NewFlagSet("try", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8080/report", "a route of the gateway capped per X-User")
	greedy := fs.Int("greedy", 8, "requests the greedy client sends at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return gateway.Try(os.Stdout, *url, *greedy)
}
