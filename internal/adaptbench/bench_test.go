package adaptbench

import (
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMain lets Run start this test binary as its workers.
func TestMain(m *testing.M) {
	MaybeRunWorker()
	os.Exit(m.Run())
}

// redisAddr returns KEYCAP_REDIS_ADDR: without it the test fails under CI
// (CI set) or scripts/test (KEYCAP_REQUIRE_SERVICES=1), and is skipped
// elsewhere.
func redisAddr(t *testing.T) string {
	t.Helper()
	a := os.Getenv("KEYCAP_REDIS_ADDR")
	if a == "" {
		if os.Getenv("CI") != "" || os.Getenv("KEYCAP_REQUIRE_SERVICES") == "1" {
			t.Fatal("KEYCAP_REDIS_ADDR is not set (required under CI and scripts/test)")
		}
		t.Skip("KEYCAP_REDIS_ADDR is not set; run `eval \"$(scripts/services.sh up)\"` from the repository's root")
	}
	c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s: %v", a, err)
	}
	return a
}

// workerBinary builds the harness's command without the race detector and
// returns its path: the workers are the load and the strategies, and under
// -race three of them on two cores cannot keep up with the arrivals (their
// decisions outlive the decision budget, and the run measures the
// instrumentation). This process — the backend and the measures — keeps
// the test's build; keycap's own tests check its code under -race.
func workerBinary(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "adaptbench")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", exe, "./cmd/adaptbench")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the workers: %v\n%s", err, out)
	}
	return exe
}

// TestShortRun runs a short schedule with no limit, keycap at C0 and a
// per-process peer, and checks what must hold whatever the machine: without
// a limit 4× the load queues past the SLO; keycap's parent keeps the backend
// at C0 or below across the processes, with a goodput near capacity at 4×;
// the peer reports its limits; the report and the plot are written.
func TestShortRun(t *testing.T) {
	cfg := DefaultConfig(1)
	cfg.Capacity = 10
	scale := 0.15
	if testing.Short() {
		scale = 0.1
	}
	cfg.Phases = Schedule(cfg.Capacity, scale)
	cfg.Strategies = []string{"none", "keycap-fixed-C", "failsafe-adaptive", "keycap-adaptive"}
	cfg.RedisAddr = redisAddr(t)
	cfg.Executable = workerBinary(t)
	cfg.Stderr = tlog{t}
	cfg.Progress = tlog{t}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Result{}
	for _, r := range rep.Results {
		by[r.Strategy] = r
	}
	const surge = 1 // the 4× phase at C0

	none := by["none"]
	if p := none.Phases[surge]; p.P50 <= cfg.SLO || p.Peak <= cfg.Capacity {
		t.Errorf("none at 4×: p50 %v (SLO %v), peak in-flight %d (C0 %d): want the backend queueing past both",
			p.P50, cfg.SLO, p.Peak, cfg.Capacity)
	}

	fixed := by["keycap-fixed-C"]
	if fixed.Peak > cfg.Capacity || fixed.Peak == 0 {
		t.Errorf("keycap-fixed-C: peak in-flight %d at the backend, want 1..%d", fixed.Peak, cfg.Capacity)
	}
	if g, gn := fixed.Phases[surge].Goodput, none.Phases[surge].Goodput; g < 0.6 || g <= gn {
		t.Errorf("keycap-fixed-C at 4×: goodput %.2f of C/S, want ≥ 0.6 and above none's %.2f", g, gn)
	}
	if fixed.FailedRate > 0.05 {
		t.Errorf("keycap-fixed-C: %.1f %% of admissions failed", 100*fixed.FailedRate)
	}
	if fixed.RefusedRate == 0 {
		t.Error("keycap-fixed-C refused nothing at 4×")
	}

	peer := by["failsafe-adaptive"]
	if len(peer.Limit) == 0 || peer.Limit[0].V <= 0 {
		t.Errorf("failsafe-adaptive: no limit trajectory (%v)", peer.Limit)
	}

	// keycap-adaptive starts at 2C0 and follows the backend down: once C
	// halved, its total is below its start, and it serves more than the
	// fixed total, now twice the capacity.
	ad := by["keycap-adaptive"]
	const halved = 2 // the 4× phase at C0/2
	if n := len(ad.Limit); n == 0 || ad.Limit[n-1].V >= float64(2*cfg.Capacity) {
		t.Errorf("keycap-adaptive: total trajectory %v, want it to end below its start of %d", ad.Limit, 2*cfg.Capacity)
	}
	if g, gf := ad.Phases[halved].Goodput, fixed.Phases[halved].Goodput; g <= gf {
		t.Errorf("keycap-adaptive at 4× with C halved: goodput %.2f of C/S, want above keycap-fixed-C's %.2f", g, gf)
	}

	dir := t.TempDir()
	var md strings.Builder
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + md.String())
	for _, n := range cfg.Strategies {
		if !strings.Contains(md.String(), "| "+n+" |") {
			t.Errorf("no row for %s", n)
		}
	}
	path := filepath.Join(dir, "adaptive.png")
	if err := rep.WritePNG(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 400 {
		t.Errorf("plot of %v", b)
	}
}

// TestRegistry checks the order of the strategies and that a strategy
// registered from another file runs after the built-in ones.
func TestRegistry(t *testing.T) {
	names := Names()
	if strings.Join(names[:len(DefaultOrder)], ",") != strings.Join(DefaultOrder, ",") {
		t.Fatalf("Names() = %v, want %v first", names, DefaultOrder)
	}
	if _, err := Lookup("no-such"); err == nil {
		t.Error("Lookup of an unknown strategy succeeded")
	}
	s, err := Lookup("none")
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("registering a name twice did not panic")
			}
		}()
		Register(s)
	}()
}

// tlog writes the workers' stderr and the progress to the test log.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
