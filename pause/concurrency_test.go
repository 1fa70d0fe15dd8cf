package pause_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
)

// hiddenCap is an API with a hidden concurrency limit: past cap calls in
// flight it answers 429 at once (Retry-After: 0, as an API that limits
// concurrency rather than a rate says "try again now").
type hiddenCap struct {
	cap              int64
	inflight         atomic.Int64
	ok, refused, max atomic.Int64
}

func (v *hiddenCap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := v.inflight.Add(1)
	defer v.inflight.Add(-1)
	if n > v.cap {
		v.refused.Add(1)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	for m := v.max.Load(); n > m && !v.max.CompareAndSwap(m, n); m = v.max.Load() {
	}
	v.ok.Add(1)
	time.Sleep(20 * time.Millisecond) // the vendor's work: time
}

// TestConcurrencyFindsTheVendorsLimit: workers on two Limiters (two
// processes' worth) call a vendor whose hidden limit is 20 through
// Transports capped by one adaptive total, starting at 4: the total
// finds the limit, and once it has, few calls meet it.
func TestConcurrencyFindsTheVendorsLimit(t *testing.T) {
	v := &hiddenCap{cap: 20}
	srv := httptest.NewServer(v)
	defer srv.Close()
	st := memstore.New()
	vendorTotal := keycap.MustParent("vendor", 4, keycap.WithAdaptive(keycap.Adaptive{Floor: 1, Ceiling: 100, Interval: 50 * time.Millisecond, OverloadsOnly: true}))
	spec := keycap.Spec{Name: "vendor-calls", Max: 100, Parent: vendorTotal, Wait: 10 * time.Second}
	var lims []*keycap.Limiter
	var clients []*http.Client
	var cut atomic.Bool // the total has been cut for an overload once
	for _, node := range []string{"a", "b"} {
		var obs keycap.Observer
		if node == "a" {
			obs = keycap.ObserverFunc(func(e keycap.Event) {
				if e.Kind == keycap.TotalChanged {
					if e.Tuning.Reason == "overload" {
						cut.Store(true)
					}
					t.Logf("v%d %d->%d %s inflight %.1f done %d over %d", e.Tuning.Version%1000, e.Tuning.Previous, e.Tuning.Total, e.Tuning.Reason, e.Tuning.InFlight, e.Tuning.Completed, e.Tuning.Overloads)
				}
			})
		}
		lim, err := keycap.NewLimiter(st, keycap.WithNode(node), keycap.WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		defer lim.Close()
		ps, err := pause.New(lim)
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
		clients = append(clients, &http.Client{Transport: ps.Transport(nil, pause.WithConcurrency(func(api string) (keycap.Limit, bool) {
			return spec.For(api), true
		}))})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 80 { // 8 workers of 10 calls at once, on two processes
		c := clients[i%2]
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := c.Do(req)
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, keycap.ErrLimitExceeded) {
						t.Error(err)
						return
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	// 10 s of the aim is 200 intervals of 50 ms: settled well before.
	// Settled means near the limit and past the first cut: until the total
	// first probes past the vendor's limit it keeps growing, and on a
	// loaded machine that first signal comes later, the ramp going further
	// (to 28 in one CI run, whose "steady state" then began at 18 and
	// counted the ramp's refusals: 2.59 % of the calls).
	converge := time.Now()
	for {
		tu, _ := lims[0].Tuning(vendorTotal)
		if tu.Total >= 18 && cut.Load() {
			break
		}
		if time.Since(converge) > 20*time.Second {
			t.Fatalf("the total is %d after 20 s (cut for an overload: %v), want it near 20 and past its first cut", tu.Total, cut.Load())
		}
		time.Sleep(10 * time.Millisecond) // polling the total: nothing to wait on but time
	}
	t.Logf("total %d after %s", func() int { tu, _ := lims[0].Tuning(vendorTotal); return tu.Total }(), time.Since(converge).Round(time.Millisecond))
	// Steady state: 100 intervals.
	ok0, refused0 := v.ok.Load(), v.refused.Load()
	// The bounds leave room for a loaded machine, whose own time inside
	// each call keeps the vendor below its limit while the total probes
	// past it (measured: 18–21 on a quiet one).
	lo, hi := 1<<31, 0
	for range 100 {
		at, _ := lims[0].Tuning(vendorTotal)
		next := time.Now().Add(time.Second)
		for tu, _ := lims[0].Tuning(vendorTotal); tu.Version == at.Version; tu, _ = lims[0].Tuning(vendorTotal) {
			if time.Now().After(next) {
				t.Fatalf("the total did not move on from version %d in a second (20 intervals)", at.Version)
			}
			time.Sleep(5 * time.Millisecond) // an interval passing: nothing to wait on but time
		}
		tu, _ := lims[0].Tuning(vendorTotal)
		lo, hi = min(lo, tu.Total), max(hi, tu.Total)
		if tu.Total < 15 || tu.Total > 30 {
			t.Errorf("steady state: total %d (%s), want within [15, 30]", tu.Total, tu.Reason)
		}
	}
	t.Logf("steady state: total %d–%d", lo, hi)
	ok, refused := v.ok.Load()-ok0, v.refused.Load()-refused0
	share := float64(refused) / float64(ok+refused)
	t.Logf("steady state: %d calls served, %d refused (%.2f %%), most in flight at the vendor %d", ok, refused, 100*share, v.max.Load())
	if share > 0.02 { // the aim is under 1 %; measured 0.4–0.5 % under -race
		t.Errorf("%.2f %% of the calls met the vendor's limit in steady state, want under 2 %%", 100*share)
	}
}
