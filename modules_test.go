package keycap_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/keycap/keycap/internal/testkit"
)

// TestCoreModulePullsNothing: a fresh module that imports every package of
// the core module has nothing but the core in its module graph — none of
// River, asynq, pgx, Prometheus, centrifuge or yaml, nor any other
// third-party module.
func TestCoreModulePullsNothing(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		if !strings.Contains(p, "/internal/") {
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) < 10 {
		t.Fatalf("only %d core packages listed: %v", len(pkgs), pkgs)
	}
	graph, _ := testkit.Consumer(t, pkgs, map[string]string{"github.com/keycap/keycap": "."}, nil)
	want := []string{"example.com/consumer", "github.com/keycap/keycap"}
	if strings.Join(graph, " ") != strings.Join(want, " ") {
		t.Fatalf("a module importing the core (%d packages) lists %v, want only %v", len(pkgs), graph, want)
	}
}
