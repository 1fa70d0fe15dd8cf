package keycap_test

import (
	"os/exec"
	"strings"
	"testing"
)

// corePackages must build on the standard library alone: an application that
// uses only them pulls in no third-party code.
var corePackages = []string{".", "./memstore", "./storetest", "./keycaptest", "./httplimit", "./joblimit", "./retryafter", "./pause", "./conncap", "./pushercap"}

func TestCorePackagesAreStdlibOnly(t *testing.T) {
	t.Parallel()
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, corePackages...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		// keycap's own packages are fine (internal ones included): any
		// third-party package they import is listed too.
		if !strings.HasPrefix(p, "github.com/keycap/keycap") {
			t.Errorf("core package depends on %s", p)
		}
	}
}
