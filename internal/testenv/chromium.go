package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium returns the path of the headless browser the page tests drive:
// KEYCAP_CHROMIUM, else Debian's chromium (scripts/test installs it). Without
// one the test fails or skips, as Missing says.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("KEYCAP_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	Missing(t, "chromium: install Debian's chromium package (scripts/test does)")
	return ""
}
