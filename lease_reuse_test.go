package keycap_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testhook"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// TestDoAllocatesNoLease checks the steady path of Do on memstore: the
// lease of one call is reused by the next, so a call allocates nothing.
func TestDoAllocatesNoLease(t *testing.T) {
	l, _ := newLimiter(t, memstore.New())
	lim := limit(t, keycap.Spec{Name: "reuse", Max: 1}, "k")
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	if err := l.Do(ctx, fn, lim); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if err := l.Do(ctx, fn, lim); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Do allocates %v times a call, want 0", n)
	}
}

// TestDoPinsOnAnInProcessStore checks Do on memstore, which pins: while fn
// runs, its slot is held with no expiry and no renewal (the store's clock
// moved an hour past the TTL still finds it held), and Inspect shows it as
// this Limiter's, expiring in its TTL; it is freed when fn returns. With
// inspection on, Do's lease is renewed like any, so that its label shows.
func TestDoPinsOnAnInProcessStore(t *testing.T) {
	var now atomic.Int64 // the store's clock
	clock := func() time.Duration { return time.Duration(now.Load()) }
	ctx := context.Background()
	for _, inspected := range []bool{false, true} {
		var opts []keycap.Option
		if inspected {
			opts = append(opts, keycap.WithInspection(keycap.InspectOptions{}))
		}
		l, _ := newLimiter(t, memstore.New(testhook.MemstoreClock(clock).(memstore.Option)), opts...)
		const ttl = time.Minute // no renewal while the test runs
		lim := limit(t, keycap.Spec{Name: "pin", Max: 1, TTL: ttl}, "k")
		err := l.Do(keycap.WithLabel(ctx, "job-7"), func(context.Context) error {
			now.Add(int64(100 * time.Millisecond)) // a renewed slot's Expires is now below its TTL
			if !inspected {
				now.Add(int64(time.Hour))
				if _, err := l.Acquire(ctx, lim); !errors.Is(err, keycap.ErrLimitExceeded) {
					t.Errorf("Acquire an hour past the TTL = %v, want ErrLimitExceeded: Do's slot expired", err)
				}
			}
			r, err := l.Inspect(ctx, keycap.Inspection{Name: "pin"})
			if err != nil {
				return err
			}
			if len(r.Pools) != 1 || len(r.Pools[0].Holders) != 1 {
				t.Fatalf("inspected %v: report %+v, want one pool with one holder", inspected, r)
			}
			h := r.Pools[0].Holders[0]
			wantLabel := map[bool]string{false: "", true: "job-7"}[inspected]
			pinned := h.Expires == ttl
			if !h.Here || h.Label != wantLabel || pinned == inspected {
				t.Errorf("inspected %v: holder %+v, want here, label %q, Expires = TTL: %v", inspected, h, wantLabel, !inspected)
			}
			return nil
		}, lim)
		if err != nil {
			t.Fatal(err)
		}
		acquire(t, l, lim).Release()
	}
}

// renewGate is a store whose first Renew waits for its gate to open and
// then reports every lease of its batch lost; later Renews pass through,
// each signalling on later.
type renewGate struct {
	store.Store
	calls   atomic.Int64
	entered chan struct{} // closed when the first Renew has its batch
	gate    chan struct{} // the first Renew waits for it to close
	later   chan struct{} // a send per later Renew
}

// Features declares none: Do must take a renewed lease, not a pinned slot.
func (g *renewGate) Features() store.Features { return 0 }

func (g *renewGate) Renew(ctx context.Context, batch []store.Renewal) error {
	if g.calls.Add(1) > 1 {
		select {
		case g.later <- struct{}{}:
		default:
		}
		return g.Store.Renew(ctx, batch)
	}
	close(g.entered)
	select {
	case <-g.gate:
	case <-time.After(5 * time.Second):
	}
	for i := range batch {
		batch[i].Lost = true
	}
	return nil
}

// TestDoReusesNoLeaseARenewalHolds checks that a lease released while its
// renewal is under way is not reused: the renewal, which reports it lost,
// must not reach the lease of the next Do (which would then be reported
// lost too).
func TestDoReusesNoLeaseARenewalHolds(t *testing.T) {
	g := &renewGate{Store: memstore.New(), entered: make(chan struct{}), gate: make(chan struct{}), later: make(chan struct{}, 1)}
	l, lost := limiterReportingLost(t, g)
	// Registered after the Limiter's Close, so run before it: Close waits
	// for the keeper, which may be in the gated Renew of a failed test.
	t.Cleanup(func() {
		select {
		case <-g.gate:
		default:
			close(g.gate)
		}
	})
	lim := limit(t, keycap.Spec{Name: "reuse", Max: 2, TTL: 30 * time.Millisecond}, "k")
	ctx := context.Background()
	err := l.Do(ctx, func(context.Context) error {
		select {
		case <-g.entered:
			return nil
		case <-time.After(5 * time.Second):
			t.Fatal("no renewal within 5 s")
			return nil
		}
	}, lim) // released while its renewal waits
	if err != nil {
		t.Fatal(err)
	}
	err = l.Do(ctx, func(context.Context) error {
		close(g.gate) // the renewal of the first lease ends: lost
		select {      // the keeper is done with that batch when it renews again
		case <-g.later:
			return nil
		case <-lost:
			t.Error("LeaseLost: a released lease's renewal reached a later lease")
			return nil
		case <-time.After(5 * time.Second):
			t.Fatal("no second renewal within 5 s")
			return nil
		}
	}, lim)
	if err != nil {
		t.Fatal(err)
	}
}

// TestDoReuseUnderRenewals runs Do from many goroutines, leases held from 0
// to 140 ms against a TTL of 300 ms (renewed every 100 ms, so that renewals
// and releases overlap all the time, with room for a late keeper under
// -race): no lease may be reported lost (a renewal reaching a reused lease
// would), and the pool never holds more than its max.
func TestDoReuseUnderRenewals(t *testing.T) {
	l, lost := limiterReportingLost(t, renewed{Store: memstore.New()})
	const max, workers = 4, 16
	lim := limit(t, keycap.Spec{Name: "reuse", Max: max, TTL: 300 * time.Millisecond}, "k")
	var held, over atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; ctx.Err() == nil; i++ {
				_ = l.Do(context.Background(), func(context.Context) error {
					if held.Add(1) > max {
						over.Add(1)
					}
					time.Sleep(time.Duration((w+i)%8) * 20 * time.Millisecond) // the work, held across renewals
					held.Add(-1)
					return nil
				}, lim)
			}
		}()
	}
	for range workers {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a worker did not stop within 10 s")
		}
	}
	select {
	case e := <-lost:
		t.Errorf("LeaseLost: %+v", e)
	default:
	}
	if n := over.Load(); n != 0 {
		t.Errorf("%d times more than %d holders", n, max)
	}
}

// renewed is memstore without its Pinned feature, so that Do takes a Lease
// and it is renewed.
type renewed struct {
	*memstore.Store
}

func (r renewed) Features() store.Features { return r.Store.Features() &^ store.Pinned }

// limiterReportingLost returns a Limiter on s, closed when the test ends,
// and a channel that receives its first LeaseLost event.
func limiterReportingLost(t *testing.T, s keycap.Store) (*keycap.Limiter, <-chan keycap.Event) {
	lost := make(chan keycap.Event, 1)
	l, err := keycap.NewLimiter(s, keycap.WithObserver(keycap.ObserverFunc(func(e keycap.Event) {
		if e.Kind == keycap.LeaseLost {
			select {
			case lost <- e:
			default:
			}
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, lost
}
