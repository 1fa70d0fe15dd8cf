package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// Consumer writes a fresh module, outside any workspace, whose main package
// imports the given packages and which requires keycap's modules from the
// given directories (module path → directory) at the versions of
// requirements given (go.mod require lines), as a user's module would. It
// returns the modules in its graph (`go list -m all`) and the modules whose
// packages its program links (`go list -deps`). keycap's modules come from
// their directories; the others from the module cache, which building the
// module under test filled, so it usually needs no network.
func Consumer(t testing.TB, imports []string, modules map[string]string, requires []string) (graph, linked []string) {
	t.Helper()
	dir := t.TempDir()
	var mod strings.Builder
	mod.WriteString("module example.com/consumer\n\ngo 1.26.0\n\n")
	paths := make([]string, 0, len(modules))
	for p := range modules {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		abs, err := filepath.Abs(modules[p])
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&mod, "require %s v0.0.0-00010101000000-000000000000\nreplace %s => %s\n", p, p, abs)
	}
	for _, r := range requires {
		fmt.Fprintf(&mod, "require %s\n", r)
	}
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, imp := range imports {
		fmt.Fprintf(&src, "\t_ %q\n", imp)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	for name, text := range map[string]string{"go.mod": mod.String(), "main.go": src.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		// Outside the workspace, as a user's module is. The module cache
		// usually holds everything (the module under test was just
		// built); GOPROXY is inherited so that a version the workspace
		// did not select can still be fetched on a machine with a network.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOSUMDB=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.Fields(string(out))
	}
	// -e: an offline cache may lack the metadata of modules the graph
	// names without using them; their paths are all this needs.
	graph = run("list", "-m", "-e", "-f", "{{.Path}}", "all")
	seen := map[string]bool{}
	for _, m := range run("list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".") {
		if !seen[m] {
			seen[m] = true
			linked = append(linked, m)
		}
	}
	sort.Strings(linked)
	return graph, linked
}

// Heavy lists the third-party modules that only some front doors need: a
// module that does not use them must not pull them in.
var Heavy = []string{
	"github.com/riverqueue/river",
	"github.com/hibiken/asynq",
	"github.com/jackc/pgx",
	"github.com/prometheus/",
	"github.com/centrifugal/",
	"go.yaml.in/yaml",
	"gopkg.in/yaml",
	"google.golang.org/grpc",
	"connectrpc.com/",
	"github.com/caddyserver/",
}

// ThisModule returns the module of the test's directory with the keycap
// modules its go.mod replaces with directories (module path → directory),
// and its other requirements: what Consumer needs to require it as a user
// would, at the versions it was tested with.
func ThisModule(t testing.TB) (modules map[string]string, requires []string) {
	t.Helper()
	data, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	modules = map[string]string{}
	inRequire := false
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "module":
			modules[f[1]] = "."
		case len(f) == 4 && f[0] == "replace" && f[2] == "=>":
			modules[f[1]] = f[3]
		case len(f) == 2 && f[0] == "require" && f[1] == "(":
			inRequire = true
		case len(f) == 1 && f[0] == ")":
			inRequire = false
		case inRequire && len(f) >= 2 && !strings.HasPrefix(f[0], "github.com/keycap/keycap"):
			requires = append(requires, f[0]+" "+f[1])
		}
	}
	return modules, requires
}

// CheckLight fails t if mods holds a Heavy module other than those starting
// with one of own: the ones the package under test exists to adapt.
func CheckLight(t testing.TB, mods []string, own ...string) {
	t.Helper()
	for _, m := range mods {
		for _, h := range Heavy {
			if !strings.HasPrefix(m, h) {
				continue
			}
			mine := false
			for _, o := range own {
				mine = mine || strings.HasPrefix(m, o)
			}
			if !mine {
				t.Errorf("a program importing only this package links %s", m)
			}
		}
	}
}
