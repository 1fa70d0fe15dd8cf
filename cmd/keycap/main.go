// Command keycap is the keycap gateway: a reverse proxy that caps the HTTP
// requests in flight per key and the Pusher-protocol WebSocket connections
// per user, in front of an application in any language.
//
//	keycap [serve] [-config] keycap.yaml  serve (SIGHUP reloads the file, SIGTERM drains and stops)
//	keycap check [-config] keycap.yaml    validate the file and exit
//	keycap demo [-listen addr]            run the demo upstream alone
//	keycap try [-url url]                 a greedy client and two polite ones, against a gateway
//	keycap inspect [-json] [-key K]       what a gateway's admin page shows: slots, keys, refusals, the last 15 minutes
//	keycap override set|reset|list        change one key's max or share on every gateway, live
//	keycap health [-url url]              exit 0 when a gateway is ready: a container's health check
//	keycap version                        the version, commit and Go that built it
//	keycap help [command]                 list the commands, or one command's flags
//
// docs/gateway.md is the configuration reference.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	// Trusted roots for an https upstream, a JWKS URL or a TLS Redis where
	// the system has none: the image is FROM scratch.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
)

const usage = `keycap: a gateway that caps requests in flight per key and WebSockets per user.

Usage:
  keycap [serve] [-config] FILE   serve the gateway (SIGHUP reloads FILE, SIGTERM drains and stops)
  keycap check [-config] FILE     validate FILE, listing every problem with its line, and exit
  keycap demo [-listen ADDR]      run the demo upstream alone (default 127.0.0.1:8081)
  keycap try [-url URL]           send a greedy client and two polite ones to a gateway
  keycap inspect [-key K]         print what the gateway's admin page shows (needs admin_api.token)
  keycap override set|reset|list  change one key's max or share on every gateway, live
  keycap health [-url URL]        exit 0 when the gateway's /readyz answers 200 (a container's health check)
  keycap version                  print the version, the commit and the Go that built keycap
  keycap help [COMMAND]           this list, or COMMAND's flags

Try it:  keycap -config examples/gateway.yaml, then keycap try in another terminal.
The configuration reference is docs/gateway.md.
`

// synopses are what keycap help COMMAND says of each command, after its
// name.
var synopses = map[string]string{
	"serve":    "[-watch] [-config] FILE\n\nServe the gateway configured by FILE (default keycap.yaml). SIGHUP reloads FILE\n(a bad file keeps the configuration in force), and so does a change with -watch.\nSIGTERM and SIGINT drain (/readyz 503 for shutdown_delay) and stop.",
	"check":    "[-config] FILE\n\nValidate FILE as serve would load it, listing every problem with its line,\nand exit: 0 when it is valid.",
	"demo":     "[-listen ADDR]\n\nRun the demo upstream alone: the application examples/gateway.yaml fronts.",
	"try":      "[-url URL] [-header 'NAME: VALUE']... [-token TOKEN]\n\nSend, at once, a greedy client's requests (alice) and, one after the other,\ntwo polite clients' (bob, carol) to URL, a route capped per X-User, and print\nwhat each got.",
	"inspect":  "[-json] [-admin URL[,URL…]] [-token TOKEN] [-route R] [-q TEXT] [-sort refused|last|slot|key] [-n N] [-key K]\n\nPrint what the gateway's admin page shows: each limit's slots in use, keys,\nwaiters and refusals now, and over the last 15 minutes each route's requests\nand the keys refused most. Several -admin addresses (one per gateway of the\nstore) add their histories up. -key shows one key: its holders on every\ngateway, with their age, gateway and request ID.",
	"override": "set|reset|list ...",
	"health":   "[-url URL]\n\nAsk a gateway's /readyz, and exit 0 when it answers 200, 1 otherwise: the health\ncheck of an image that has no shell and no curl.",
	"version":  "\n\nPrint the version, the commit and the Go that built keycap.",
}

// commands runs keycap's commands by name.
func commands(name string) (func(args []string) error, bool) {
	switch name {
	case "serve":
		return serve, true
	case "check":
		return check, true
	case "demo":
		return demo, true
	case "try":
		return try, true
	case "inspect":
		return inspect, true
	case "override":
		return override, true
	case "health":
		return health, true
	case "version":
		return printVersion, true
	}
	return nil, false
}

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch {
	case cmd == "help" && len(args) > 0 && !isHelp(args[0]):
		// keycap help CMD: CMD's own help.
		cmd, args = args[0], []string{"-h"}
	case cmd == "help" || (cmd == "serve" && len(args) > 0 && isHelp(args[0])):
		fmt.Print(usage)
		return
	case cmd == "serve" && len(args) > 0 && (args[0] == "-version" || args[0] == "--version"):
		cmd, args = "version", nil
	}
	run, ok := commands(cmd)
	if !ok {
		if looksLikeFile(cmd) {
			run, args = serve, append([]string{cmd}, args...) // keycap FILE
		} else {
			fmt.Fprintf(os.Stderr, "keycap: unknown command %q\n\n%s", cmd, usage)
			os.Exit(2)
		}
	}
	err := run(args)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keycap:", err)
		os.Exit(1)
	}
}

// newFlags returns the flag set of command name, whose -h prints its
// synopsis (commands) and its flags on standard output.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stdout)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: keycap %s %s\n", name, synopses[strings.Fields(name)[0]])
		has := false
		fs.VisitAll(func(*flag.Flag) { has = true })
		if has {
			fmt.Fprintln(fs.Output(), "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// looksLikeFile reports whether a first argument that names no command
// is a configuration file to serve: one that exists, or a YAML file's name.
func looksLikeFile(arg string) bool {
	if st, err := os.Stat(arg); err == nil && st.Mode().IsRegular() {
		return true
	}
	return strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml")
}

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// configFlag parses the flags of serve and check: the configuration file,
// given as -config FILE or as the one argument.
// extra declares the command's other flags.
func configFlag(name string, args []string, extra ...func(*flag.FlagSet)) (string, error) {
	flags := newFlags(name)
	file := flags.String("config", "keycap.yaml", "configuration file (or give it as the argument)")
	for _, f := range extra {
		f(flags)
	}
	if err := flags.Parse(args); err != nil {
		return "", err
	}
	set := false
	flags.Visit(func(f *flag.Flag) { set = set || f.Name == "config" })
	switch {
	case flags.NArg() > 1:
		return "", fmt.Errorf("%s: one configuration file, not %d (keycap help %s)", name, flags.NArg(), name)
	case flags.NArg() == 1 && set && flags.Arg(0) != *file:
		return "", fmt.Errorf("%s: two configuration files, -config %s and %s: give one", name, *file, flags.Arg(0))
	case flags.NArg() == 1:
		*file = flags.Arg(0)
	}
	if _, err := os.Stat(*file); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no configuration file %s: give one with -config FILE (examples/gateway.yaml to try it; docs/gateway.md describes them; keycap help lists the commands)", *file)
	}
	return *file, nil
}

func serve(args []string) error {
	var watch bool
	file, err := configFlag("serve", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&watch, "watch", false, "reload when the configuration file (or a key file it names) changes, as SIGHUP does:\nfor a Kubernetes ConfigMap or Secret mounted as a volume")
	})
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
	if watch {
		stop, err := s.Watch()
		if err != nil { // as a bad file would: stop before serving for long
			_ = s.Shutdown()
			return fmt.Errorf("-watch %s: %w", file, err)
		}
		defer stop()
	}
	for got := range sig {
		if got == syscall.SIGHUP {
			_ = s.Reload() // a bad file keeps the old configuration; the log says why
			continue
		}
		return s.Drain(sig) // a second SIGTERM or SIGINT cuts shutdown_delay short
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
	fs := newFlags("demo")
	addr := fs.String("listen", "127.0.0.1:8081", "address to serve the demo upstream on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "keycap demo upstream on http://%s\n", *addr)
	return http.ListenAndServe(*addr, gateway.Demo())
}

func try(args []string) error {
	fs := newFlags("try")
	url := fs.String("url", "http://127.0.0.1:8080/report", "a route of the gateway capped per X-User")
	greedy := fs.Int("greedy", 8, "requests the greedy client sends at once")
	header := http.Header{}
	fs.Func("header", "a header every request carries, 'NAME: VALUE' (repeat it for more)", func(v string) error {
		name, value, ok := strings.Cut(v, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("%q: give it as 'NAME: VALUE'", v)
		}
		header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		return nil
	})
	token := fs.String("token", "", "a bearer token every request carries (Authorization: Bearer TOKEN), for a route keyed by a JWT claim")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *token != "" {
		header.Set("Authorization", "Bearer "+*token)
	}
	return gateway.Try(os.Stdout, *url, *greedy, header)
}

func health(args []string) error {
	fs := newFlags("health")
	url := fs.String("url", "http://127.0.0.1:9091/readyz", "the gateway's /readyz, on its admin listener")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("health: unexpected argument %q", fs.Arg(0))
	}
	c := &http.Client{Timeout: *timeout}
	resp, err := c.Get(*url)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %s: %s", *url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// version and revision are the release's version and commit, set by a
// release build (-ldflags "-X main.version=v1.2.3 -X main.revision=…",
// deploy/build); empty, keycap reports its module's version from the build:
// v1.2.3 when installed with go install, a pseudo-version and the commit
// when built with -buildvcs=true in a checkout, (devel) otherwise (go build
// in the repository's workspace stamps no commit).
var version, revision string

// versionLine is what keycap version prints.
func versionLine() string {
	v, rev, at, dirty := version, revision, "", ""
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = ", " + s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = " with changes"
				}
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	built := ""
	if rev != "" {
		built = fmt.Sprintf(" (commit %s%s%s)", rev, dirty, at)
	}
	return fmt.Sprintf("keycap %s%s %s %s/%s", v, built, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func printVersion(args []string) error {
	fs := newFlags("version")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version: unexpected argument %q", fs.Arg(0))
	}
	fmt.Println(versionLine())
	return nil
}
