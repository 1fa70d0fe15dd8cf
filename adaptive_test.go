package keycap_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/nullstore"
)

func TestAdaptiveParentIsValidated(t *testing.T) {
	for _, c := range []struct {
		max   int
		a     keycap.Adaptive
		field string
	}{
		{10, keycap.Adaptive{Floor: 0, Ceiling: 20}, "parent adaptive floor"},
		{10, keycap.Adaptive{Floor: 5, Ceiling: 4}, "parent adaptive ceiling"},
		{10, keycap.Adaptive{Floor: 11, Ceiling: 20}, "parent adaptive floor"},
		{30, keycap.Adaptive{Floor: 1, Ceiling: 20}, "parent adaptive floor"},
		{10, keycap.Adaptive{Floor: 1, Ceiling: 20, Interval: time.Millisecond}, "parent adaptive interval"},
		{10, keycap.Adaptive{Floor: 1, Ceiling: 20, Interval: -time.Second}, "parent adaptive interval"},
		{10, keycap.Adaptive{Floor: 1, Ceiling: 20, Tolerance: 0.9}, "parent adaptive tolerance"},
	} {
		_, err := keycap.NewParent("p", c.max, keycap.WithAdaptive(c.a))
		var ie *keycap.InvalidLimitError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("max %d, %+v: %v, want an *InvalidLimitError on %q", c.max, c.a, err, c.field)
		}
	}
	p, err := keycap.NewParent("p", 10, keycap.WithAdaptive(keycap.Adaptive{Floor: 2, Ceiling: 40}))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := p.Adaptive(); !ok || a.Interval != keycap.DefaultInterval || a.Tolerance != keycap.DefaultTolerance {
		t.Fatalf("Adaptive() = %+v, %v: want the defaults set", a, ok)
	}
	// A key's max may go up to the ceiling; its weight only up to the floor.
	if err := (keycap.Spec{Name: "k", Max: 40, Parent: p}).Validate(); err != nil {
		t.Fatalf("a key's max at the ceiling: %v", err)
	}
	var ie *keycap.InvalidLimitError
	if err := (keycap.Spec{Name: "k", Max: 41, Parent: p}).Validate(); !errors.As(err, &ie) || ie.Field != "Max" {
		t.Fatalf("a key's max above the ceiling: %v", err)
	}
	if err := (keycap.Spec{Name: "k", Max: 10, Weight: 3, Parent: p}).Validate(); !errors.As(err, &ie) || ie.Field != "Weight" {
		t.Fatalf("a weight above the floor: %v", err)
	}
}

func TestAdaptiveParentNeedsTotals(t *testing.T) {
	lim, err := keycap.NewLimiter(nullstore.New())
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	p := keycap.MustParent("p", 4, keycap.WithAdaptive(keycap.Adaptive{Floor: 1, Ceiling: 8}))
	_, err = lim.Acquire(context.Background(), keycap.Spec{Name: "k", Max: 4, Parent: p}.For("a"))
	if !errors.Is(err, keycap.ErrNotSupported) {
		t.Fatalf("an adaptive parent on a store without totals: %v, want ErrNotSupported", err)
	}
}

// psBackend is a backend of capacity c concurrent jobs and no-load
// latency s: a job that starts with n jobs in service takes s × n ÷ c once
// n is above c (processor sharing, read at the start).
type psBackend struct {
	c    int
	s    time.Duration
	mu   sync.Mutex
	n    int
	peak int
}

func (b *psBackend) serve(ctx context.Context) {
	b.mu.Lock()
	b.n++
	b.peak = max(b.peak, b.n)
	d := time.Duration(float64(b.s) * max(1, float64(b.n)/float64(b.c)))
	b.mu.Unlock()
	select { // the job's own duration: the backend is made of time
	case <-time.After(d):
	case <-ctx.Done():
	}
	b.mu.Lock()
	b.n--
	b.mu.Unlock()
}

func (b *psBackend) peakNow() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// tunings collects TotalChanged events.
type tunings struct {
	mu   sync.Mutex
	list []keycap.Tuning
}

func (ts *tunings) Observe(e keycap.Event) {
	if e.Kind == keycap.TotalChanged {
		ts.mu.Lock()
		ts.list = append(ts.list, *e.Tuning)
		ts.mu.Unlock()
	}
}

func (ts *tunings) all() []keycap.Tuning {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]keycap.Tuning(nil), ts.list...)
}

// drive runs callers on lims (round robin) against b, each acquiring a
// slot of key (its own index % keys) under p with a wait, until ctx ends;
// overload marks every lease overloaded.
func drive(ctx context.Context, t *testing.T, lims []*keycap.Limiter, p *keycap.Parent, b *psBackend, callers, keys int, overload bool) *sync.WaitGroup {
	var wg sync.WaitGroup
	keyMax := p.Max()
	if a, ok := p.Adaptive(); ok && !a.Shadow {
		keyMax = a.Ceiling
	}
	for i := range callers {
		lim := lims[i%len(lims)]
		spec := keycap.Spec{Name: "adaptive-test", Max: keyMax, Parent: p, Wait: 200 * time.Millisecond, TTL: 10 * time.Second}
		key := string(rune('a' + i%keys))
		wg.Go(func() {
			for ctx.Err() == nil {
				ls, err := lim.Acquire(ctx, spec.For(key))
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, keycap.ErrLimitExceeded) {
						t.Errorf("Acquire: %v", err)
						return
					}
					continue
				}
				b.serve(ctx)
				if overload {
					ls.Overloaded()
				}
				ls.Release()
			}
		})
	}
	return &wg
}

func TestAdaptiveTotalFindsTheBackend(t *testing.T) {
	st := memstore.New()
	obs := &tunings{}
	var lims []*keycap.Limiter
	for _, node := range []string{"a", "b", "c"} {
		lim, err := keycap.NewLimiter(st, keycap.WithNode(node), keycap.WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		defer lim.Close()
		lims = append(lims, lim)
	}
	const c = 8
	p := keycap.MustParent("adaptive-finds", 2, keycap.WithAdaptive(keycap.Adaptive{Floor: 1, Ceiling: 64, Interval: 50 * time.Millisecond}))
	b := &psBackend{c: c, s: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	wg := drive(ctx, t, lims, p, b, 40, 5, false)
	defer wg.Wait()
	defer cancel()

	// It grows from 2 to the backend's capacity (40 callers could hold 40).
	testkit.WaitUntil(t, 20*time.Second, "the total to reach the capacity", func() bool {
		tu, _ := lims[0].Tuning(p)
		return tu.Total >= c
	})
	// Then it stays near it: never above what queueing allows for long.
	high := 0
	for range 40 {
		steps := lims[0].TunerSteps(p)
		testkit.WaitUntil(t, 10*time.Second, "an interval", func() bool { return lims[0].TunerSteps(p) > steps })
		tu, _ := lims[0].Tuning(p)
		if tu.Total > 3*c {
			high++
		}
	}
	if high > 4 {
		t.Fatalf("the total was above 3× the capacity in %d of 40 intervals", high)
	}
	cancel()
	wg.Wait()
	// Every process follows the same total.
	want, _ := lims[0].Tuning(p)
	for i, lim := range lims[1:] {
		testkit.WaitUntil(t, 10*time.Second, "the processes to agree", func() bool {
			tu, _ := lim.Tuning(p)
			want, _ = lims[0].Tuning(p)
			return tu.Version == want.Version && tu.Total == want.Total
		})
		_ = i
	}
	var grown, cut bool
	for _, e := range obs.all() {
		grown = grown || e.Reason == "demand"
		cut = cut || e.Reason == "latency"
		if e.Parent != "adaptive-finds" || e.Shadow || e.Total == e.Previous {
			t.Fatalf("event %+v", e)
		}
	}
	if !grown || !cut {
		t.Fatalf("changes seen: grown %v, cut for latency %v; want both", grown, cut)
	}
}

func TestAdaptiveTotalCutsOnOverload(t *testing.T) {
	lim, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	p := keycap.MustParent("adaptive-overload", 20, keycap.WithAdaptive(keycap.Adaptive{Floor: 3, Ceiling: 64, Interval: 20 * time.Millisecond}))
	b := &psBackend{c: 100, s: 5 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	wg := drive(ctx, t, []*keycap.Limiter{lim}, p, b, 10, 3, true)
	defer wg.Wait()
	defer cancel()
	testkit.WaitUntil(t, 20*time.Second, "the total to reach the floor", func() bool {
		tu, _ := lim.Tuning(p)
		return tu.Total == 3 && tu.Reason == "overload"
	})
	if peak := b.peakNow(); peak > 20 {
		t.Fatalf("the backend saw %d at once, above the start of 20", peak)
	}
	// The store enforces the total: once the jobs granted before the cut
	// are done, the backend sees at most 3.
	steps := func(n int64) {
		at := lim.TunerSteps(p)
		testkit.WaitUntil(t, 10*time.Second, "intervals", func() bool { return lim.TunerSteps(p) >= at+n })
	}
	steps(2)
	b.mu.Lock()
	b.peak = 0
	b.mu.Unlock()
	steps(10)
	cancel()
	wg.Wait()
	if peak := b.peakNow(); peak > 3 || peak == 0 {
		t.Fatalf("at a total of 3 the backend saw %d at once", peak)
	}
}

// TestAdaptiveTotalCutsHereOnLatency: when the backend slows down past
// the tolerance, a process cuts what it enforces from its own last
// completions (tune.Early), before the processes agree on the interval:
// what it enforces falls below the agreed total. Without overloads
// nothing else does that.
func TestAdaptiveTotalCutsHereOnLatency(t *testing.T) {
	lim, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	p := keycap.MustParent("adaptive-early", 12, keycap.WithAdaptive(keycap.Adaptive{Floor: 1, Ceiling: 64, Interval: 500 * time.Millisecond, Tolerance: 1.1}))
	b := &psBackend{c: 100, s: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	wg := drive(ctx, t, []*keycap.Limiter{lim}, p, b, 12, 3, false)
	defer wg.Wait()
	defer cancel()
	// A no-load latency agreed first: the early cut needs one.
	testkit.WaitUntil(t, 20*time.Second, "a no-load latency", func() bool {
		tu, _ := lim.Tuning(p)
		return tu.Baseline > 0
	})
	b.mu.Lock()
	b.c = 4 // 12 in flight take 3 × as long
	b.mu.Unlock()
	testkit.WaitUntil(t, 20*time.Second, "a cut here, below the agreed total", func() bool {
		before, _ := lim.Tuning(p)
		enforced := lim.Enforced(p)
		after, _ := lim.Tuning(p) // the same agreed total on both sides
		return before.Version == after.Version && enforced < after.Total
	})
	cancel()
	wg.Wait()
}

func TestAdaptiveTotalHoldsWithoutWork(t *testing.T) {
	lim, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	p := keycap.MustParent("adaptive-idle", 7, keycap.WithAdaptive(keycap.Adaptive{Floor: 1, Ceiling: 64, Interval: 10 * time.Millisecond}))
	spec := keycap.Spec{Name: "adaptive-idle", Max: 7, Parent: p}
	ls, err := lim.Acquire(context.Background(), spec.For("k")) // starts the tuner
	if err != nil {
		t.Fatal(err)
	}
	ls.Release()
	testkit.WaitUntil(t, 20*time.Second, "50 intervals", func() bool { return lim.TunerSteps(p) >= 50 })
	if tu, _ := lim.Tuning(p); tu.Total != 7 {
		t.Fatalf("after 50 intervals with one short lease: %+v, want 7 held", tu)
	}
}

func TestAdaptiveTotalInShadowIsNotEnforced(t *testing.T) {
	obs := &tunings{}
	lim, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	p := keycap.MustParent("adaptive-shadow", 20, keycap.WithAdaptive(keycap.Adaptive{Floor: 2, Ceiling: 64, Interval: 20 * time.Millisecond, Shadow: true}))
	b := &psBackend{c: 100, s: 5 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	wg := drive(ctx, t, []*keycap.Limiter{lim}, p, b, 30, 3, true) // every lease overloaded
	defer wg.Wait()
	defer cancel()
	testkit.WaitUntil(t, 20*time.Second, "the shadow total to reach the floor", func() bool {
		tu, _ := lim.Tuning(p)
		return tu.Total == 2 && tu.Shadow
	})
	b.mu.Lock()
	b.peak = 0
	b.mu.Unlock()
	var over atomic.Bool
	testkit.WaitUntil(t, 20*time.Second, "the backend to see the fixed max again", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		over.Store(b.peak > 20)
		return b.peak >= 15
	})
	if over.Load() {
		t.Fatal("the backend saw more than the fixed max of 20")
	}
	for _, e := range obs.all() {
		if !e.Shadow {
			t.Fatalf("a shadow total reported %+v", e)
		}
	}
}

func TestDoReportsOverloads(t *testing.T) {
	if keycap.ReportOverload(context.Background()) {
		t.Fatal("ReportOverload found a lease in a bare context")
	}
	for _, how := range []string{"ReportOverload", "deadline"} {
		t.Run(how, func(t *testing.T) {
			lim, err := keycap.NewLimiter(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			p := keycap.MustParent("do-overload-"+how, 10, keycap.WithAdaptive(keycap.Adaptive{Floor: 2, Ceiling: 20, Interval: 10 * time.Millisecond}))
			spec := keycap.Spec{Name: "do-overload", Max: 10, Parent: p}
			testkit.WaitUntil(t, 20*time.Second, "the total to reach the floor", func() bool {
				err := lim.Do(context.Background(), func(ctx context.Context) error {
					if how == "deadline" {
						return context.DeadlineExceeded
					}
					if !keycap.ReportOverload(ctx) {
						t.Fatal("Do's context carries no lease for an adaptive parent")
					}
					return nil
				}, spec.For("k"))
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatal(err)
				}
				tu, _ := lim.Tuning(p)
				return tu.Total == 2 && tu.Reason == "overload"
			})
		})
	}
}

// TestIdleAdaptiveTotalStops: a tuner whose parent holds nothing stops, and
// the next Acquire starts another that follows the total the store kept.
func TestIdleAdaptiveTotalStops(t *testing.T) {
	defer keycap.SetTunerIdle(200 * time.Millisecond)()
	lim, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	p := keycap.MustParent("adaptive-retire", 10, keycap.WithAdaptive(keycap.Adaptive{Floor: 2, Ceiling: 20, Interval: 10 * time.Millisecond}))
	spec := keycap.Spec{Name: "adaptive-retire", Max: 10, Parent: p}
	overload := func() {
		ls, err := lim.Acquire(context.Background(), spec.For("k"))
		if err != nil {
			t.Fatal(err)
		}
		ls.Overloaded()
		ls.Release()
	}
	testkit.WaitUntil(t, 20*time.Second, "a cut", func() bool {
		overload()
		tu, _ := lim.Tuning(p)
		return tu.Total < 10
	})
	cut, _ := lim.Tuning(p)
	testkit.WaitUntil(t, 20*time.Second, "the idle tuner to stop", func() bool {
		_, running := lim.Tuning(p)
		return !running
	})
	ls, err := lim.Acquire(context.Background(), spec.For("k"))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release()
	testkit.WaitUntil(t, 20*time.Second, "the new tuner to follow the stored total", func() bool {
		tu, ok := lim.Tuning(p)
		return ok && tu.Version >= cut.Version && tu.Total <= cut.Total
	})
}

func TestOverloadStatus(t *testing.T) {
	for code := 100; code < 600; code++ {
		want := code == 429 || code == 503 || code == 504 || code == 529
		if got := keycap.OverloadStatus(code); got != want {
			t.Errorf("OverloadStatus(%d) = %v, want %v", code, got, want)
		}
	}
}
