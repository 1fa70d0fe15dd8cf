package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
)

// TestAdaptiveTotalAgreedOnRedis: three Limiters, each with a client of its
// own (as three processes), drive one adaptive parent on Redis against a
// backend of capacity 8: the total grows from 2 to the capacity, every
// Limiter follows the same total (one version at a time), and the backend
// never sees more than the total allows.
func TestAdaptiveTotalAgreedOnRedis(t *testing.T) {
	t.Parallel()
	prefix := testenv.Prefix(t, testenv.Redis(t))
	var lims []*keycap.Limiter
	for _, node := range []string{"a", "b", "c"} {
		lim, err := keycap.NewLimiter(newStore(t, testenv.Redis(t), prefix), keycap.WithNode(node), keycap.WithDecisionBudget(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		lims = append(lims, lim)
	}
	const c = 8
	p := keycap.MustParent("adaptive-redis", 2, keycap.WithAdaptive(keycap.Adaptive{Floor: 1, Ceiling: 32, Interval: 100 * time.Millisecond}))
	spec := keycap.Spec{Name: "adaptive-redis", Max: 32, Parent: p, Wait: time.Second, TTL: 10 * time.Second}

	var mu sync.Mutex
	inflight, peakOver := 0, 0 // peakOver: the most in flight above the lowest total any Limiter enforced
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 30 {
		lim := lims[i%3]
		key := string(rune('a' + i%6))
		wg.Go(func() {
			highest := func() int { // the highest total a Limiter enforces now
				hi := 0
				for _, l := range lims {
					tu, _ := l.Tuning(p)
					hi = max(hi, tu.Total)
				}
				return hi
			}
			for ctx.Err() == nil {
				// A demand carries its Limiter's total from before the
				// grant: a cut just after it must not count as over.
				before := highest()
				ls, err := lim.Acquire(ctx, spec.For(key))
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, keycap.ErrLimitExceeded) {
						t.Errorf("Acquire: %v", err)
						return
					}
					continue
				}
				mu.Lock()
				inflight++
				n := inflight
				peakOver = max(peakOver, n-max(before, highest()))
				d := time.Duration(float64(20*time.Millisecond) * max(1, float64(n)/c))
				mu.Unlock()
				select { // the backend's work: time, stretched past its capacity
				case <-time.After(d):
				case <-ctx.Done():
				}
				mu.Lock()
				inflight--
				mu.Unlock()
				ls.Release()
			}
		})
	}
	testkit.WaitUntil(t, 30*time.Second, "the total to reach the capacity", func() bool {
		tu, _ := lims[0].Tuning(p)
		return tu.Total >= c
	})
	cancel()
	wg.Wait()
	testkit.WaitUntil(t, 10*time.Second, "the Limiters to agree", func() bool {
		want, _ := lims[0].Tuning(p)
		for _, l := range lims[1:] {
			if tu, _ := l.Tuning(p); tu.Version != want.Version || tu.Total != want.Total {
				return false
			}
		}
		return want.Version > 0
	})
	// A Limiter may follow a total one interval late, and a cut leaves
	// the slots granted before it: the store never held more than the
	// highest total any Limiter enforced.
	if peakOver > 0 {
		t.Fatalf("%d in flight above the highest total of the Limiters", peakOver)
	}
}
