// Command keycap is the keycap gateway: a reverse proxy that caps the HTTP
// requests in flight per key and the Pusher-protocol WebSocket connections
// per user, in front of an application in any language.
//
//	keycap -config keycap.yaml         serve (SIGHUP reloads the file, SIGTERM drains and stops)
//	keycap check -config keycap.yaml   validate the file and exit
//	keycap demo [-listen addr]         run the demo upstream alone
//	keycap try [-url url]              a greedy client and two polite ones, against a gateway
//
// docs/gateway.md is the configuration reference.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/keycap/keycap/gateway"
)

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
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
	default:
		err = fmt.Errorf("unknown command %q: serve, check, demo or try", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keycap:", err)
		os.Exit(1)
	}
}

func configFlag(name string, args []string) (string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	file := fs.String("config", "keycap.yaml", "configuration file")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	return *file, nil
}

func serve(args []string) error {
	file, err := configFlag("serve", args)
	if err != nil {
		return err
	}
	s, err := gateway.Start(file)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
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
