package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// TestHungRedisIsTheStoresFailure: decisions on a Redis that does not
// answer (frozen with SIGSTOP) were sent, or queued behind a pipeline that
// was: Redis had each for its whole budget, and each says so
// (store.UnansweredError). They are the store's failure, reported once as
// an outage, never as the process's overload. The budget is a second:
// only a process stalled for half of it would make them its own.
func TestHungRedisIsTheStoresFailure(t *testing.T) {
	t.Parallel()
	rp := testenv.StartRedis(t)
	c := redis.NewClient(rp.Options())
	defer c.Close()
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	rec := &keycaptest.Recorder{}
	const budget = time.Second
	l, err := keycap.NewLimiter(s, keycap.WithObserver(rec), keycap.WithDecisionBudget(budget),
		keycap.WithDefaultFailMode(keycap.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lim := keycap.Spec{Name: "hung", Max: 100}.For("k") // one pool: one lane, the first call sent and the others queued behind it
	ctx := context.Background()
	if ls, err := l.Acquire(ctx, lim); err != nil {
		t.Fatal(err)
	} else {
		ls.Release()
	}
	rp.Hang()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			start := time.Now()
			_, err := l.Acquire(ctx, lim)
			took := time.Since(start)
			var be *keycap.BudgetError
			var u *store.UnansweredError
			switch {
			case !errors.Is(err, keycap.ErrStoreUnavailable) || !errors.As(err, &be) || !errors.As(err, &u):
				t.Errorf("on a hung Redis: %v, want a *StoreError wrapping a *BudgetError and the store's account", err)
			case be.Overloaded || u.Outstanding < budget/2:
				t.Errorf("on a hung Redis: %v (%+v, sent %v before the deadline), want the store's failure", err, be, u.Outstanding)
			case took > budget+time.Second:
				t.Errorf("a decision on a hung Redis took %v, budget %v", took, budget)
			}
		})
	}
	wg.Wait()
	if f, o := rec.Count(keycap.StoreFailed, ""), rec.Count(keycap.ProcessOverloaded, ""); f != 1 || o != 0 {
		t.Errorf("a hung Redis reported %d StoreFailed and %d ProcessOverloaded, want 1 and 0", f, o)
	}
}

// TestStarvedProcessIsNoOutage starves the process that decides, on a
// Redis that answers at once: one P (GOMAXPROCS 1) shared with goroutines
// that never block, so that the decisions' goroutines — the callers, the
// pipelines' senders, the readers of the replies — wait for the scheduler
// to preempt them, ten milliseconds at a time, past the budget. Every
// decision still ends within its budget and the time the process takes
// to notice, with the fail mode; none of those that ran out of budget is
// a store outage: each is ProcessOverloaded.
func TestStarvedProcessIsNoOutage(t *testing.T) {
	// Not parallel: GOMAXPROCS is the process's.
	c := testenv.Redis(t)
	s, err := redisstore.New(c, redisstore.WithPrefix(testenv.Prefix(t, c)))
	if err != nil {
		t.Fatal(err)
	}
	rec := &keycaptest.Recorder{}
	const budget = 50 * time.Millisecond
	l, err := keycap.NewLimiter(s, keycap.WithObserver(rec), keycap.WithDecisionBudget(budget),
		keycap.WithDefaultFailMode(keycap.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lims := make([]keycap.Limit, 4)
	for i := range lims {
		lims[i] = keycap.Spec{Name: "starved", Max: 1000}.For(fmt.Sprint(i))
		// Warm, past the Limiter, with time to spare on a busy machine: the
		// library loaded, connections open.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		owner := store.NewOwner()
		_, err := s.Acquire(wctx, lims[i].Pool(), owner, store.Demand{Max: 1000, TTL: time.Minute})
		if err == nil {
			_, err = s.Release(wctx, lims[i].Pool(), owner, store.Demand{Max: 1000, TTL: time.Minute}, false)
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var stop atomic.Bool
	var busy sync.WaitGroup
	defer func() {
		stop.Store(true)
		busy.Wait()
	}()
	for range 16 {
		busy.Go(func() {
			for !stop.Load() {
			}
		})
	}
	var (
		mu                sync.Mutex
		overBudget, total int
		worst             time.Duration
	)
	deadline := time.Now().Add(20 * time.Second)
	for overBudget < 10 && time.Now().Before(deadline) {
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				start := time.Now()
				ls, err := l.Acquire(ctx, lims[g%len(lims)])
				took := time.Since(start)
				if err == nil {
					ls.Release()
				}
				mu.Lock()
				defer mu.Unlock()
				total++
				var be *keycap.BudgetError
				switch {
				case err == nil:
				case !errors.As(err, &be) || !errors.Is(err, keycap.ErrStoreUnavailable):
					t.Errorf("starved: %v, want a decision or a *BudgetError", err)
				default:
					overBudget++
					// Bounded: the budget, and the time the starved process
					// takes to run the caller once it has passed.
					worst = max(worst, took-be.Waited)
					if !be.Overloaded {
						t.Errorf("starved, on a Redis that answers: %v (store time %v, waited %v), want the process's overload", err, be.StoreTime, be.Waited)
					}
				}
			})
		}
		wg.Wait()
	}
	stop.Store(true)
	busy.Wait()
	t.Logf("%d of %d decisions ran out of their budget of %v; ProcessOverloaded %d, StoreFailed %d",
		overBudget, total, budget, rec.Count(keycap.ProcessOverloaded, ""), rec.Count(keycap.StoreFailed, ""))
	if overBudget == 0 {
		t.Fatalf("no decision of %d ran out of its budget of %v in a starved process: the test starved nothing", total, budget)
	}
	if worst > time.Second {
		t.Errorf("a decision returned %v after its verdict was reached", worst)
	}
	if n := rec.Count(keycap.StoreFailed, ""); n != 0 {
		e, _ := lastEvent(rec, keycap.StoreFailed)
		t.Errorf("a starved process reported %d store outages of a Redis that answered: %v", n, e.Err)
	}
	if n := rec.Count(keycap.ProcessOverloaded, ""); n < overBudget {
		t.Errorf("%d ProcessOverloaded for %d decisions that ran out of budget, want one each", n, overBudget)
	}
}

// lastEvent returns the last event of kind k.
func lastEvent(r *keycaptest.Recorder, k keycap.EventKind) (keycap.Event, bool) {
	ev := r.Events()
	for i := len(ev) - 1; i >= 0; i-- {
		if ev[i].Kind == k {
			return ev[i], true
		}
	}
	return keycap.Event{}, false
}
