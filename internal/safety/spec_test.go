package safety_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testenv"
)

// quint runs Quint, installed by scripts/test (npm ci in spec/), on the
// protocol model spec/keycap.qnt, within d.
func quint(t *testing.T, d time.Duration, args ...string) string {
	t.Helper()
	bin := filepath.Join("spec", "node_modules", ".bin", "quint")
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "Quint: %v (run scripts/test, or npm ci in internal/safety/spec)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join("node_modules", ".bin", "quint"), args...)
	cmd.Dir = "spec"
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("quint %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestSpecScenarios runs the model's tests: the scenarios with expected
// outcomes (a handoff, the parent serving the key below its share, tokens,
// an expiry handed on, a heavy head not overtaken).
func TestSpecScenarios(t *testing.T) {
	t.Parallel()
	out := quint(t, 5*time.Minute, "test", "--backend=typescript", "keycap.qnt")
	if !strings.Contains(out, "passing") || strings.Contains(out, "failing") {
		t.Fatalf("quint test:\n%s", out)
	}
}

// TestSpecInvariants simulates the model: random executions, each state
// checked against the invariants (never over a key's max or the parent's
// total, FIFO within a pool, no slot idle while the first key can take it,
// tokens). KEYCAP_SPEC_SAMPLES sets how many executions (default 1,000),
// KEYCAP_SAFETY_SEED the seed.
func TestSpecInvariants(t *testing.T) {
	t.Parallel()
	samples := 1000
	if s := os.Getenv("KEYCAP_SPEC_SAMPLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("KEYCAP_SPEC_SAMPLES=%q: want a positive number", s)
		}
		samples = n
	}
	seed := seeds(t)[0]
	out := quint(t, 20*time.Minute, "run", "--backend=typescript", "--invariant=invariants",
		fmt.Sprintf("--max-samples=%d", samples), "--max-steps=30", fmt.Sprintf("--seed=%d", seed), "keycap.qnt")
	if !strings.Contains(out, "[ok] No violation found") {
		t.Fatalf("quint run:\n%s", out)
	}
	t.Logf("%d executions of 30 steps, seed %d: no violation", samples, seed)
}
