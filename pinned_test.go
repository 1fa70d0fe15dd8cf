package keycap_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testhook"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// TestDoPinnedReportsAsALease runs Do through each of its outcomes twice:
// on memstore, where its slot is pinned and no Lease is made, and on the
// same store with its Pinned feature hidden, where Do takes a Lease. Both must
// return the same errors, send the same events in the same order, run fn
// the same way and leave the pool free.
func TestDoPinnedReportsAsALease(t *testing.T) {
	type outcome struct {
		err    string
		events []string
		ran    bool
	}
	scenarios := []struct {
		name string
		run  func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) outcome
	}{
		{"granted", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			err := l.Do(context.Background(), func(context.Context) error { o.ran = true; return errors.New("fn's") }, lim)
			o.err = fmt.Sprint(err)
			return o
		}},
		{"refused", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			ls := acquire(t, l, lim)
			defer ls.Release()
			err := l.Do(context.Background(), func(context.Context) error { o.ran = true; return nil }, lim)
			var le *keycap.LimitError
			if !errors.As(err, &le) || le.Limit.Pool() != lim.Pool() {
				t.Errorf("Do on a full pool = %v, want its *LimitError", err)
			}
			o.err = fmt.Sprint(err)
			return o
		}},
		{"max-0-by-override", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			if err := l.SetOverride(context.Background(), keycap.Override{Name: lim.Name(), Key: lim.Key(), Max: 0}); err != nil {
				t.Fatal(err)
			}
			err := l.Do(context.Background(), func(context.Context) error { o.ran = true; return nil }, lim)
			o.err = fmt.Sprint(err)
			if err := l.ResetOverride(context.Background(), lim.Family(), lim.Name(), lim.Key()); err != nil {
				t.Fatal(err)
			}
			return o
		}},
		{"ended-context", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			o.err = fmt.Sprint(l.Do(ctx, func(context.Context) error { o.ran = true; return nil }, lim))
			return o
		}},
		{"fn-panics", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			defer func() { o.err = fmt.Sprint(recover()) }()
			_ = l.Do(context.Background(), func(context.Context) error { o.ran = true; panic("fn") }, lim)
			return o
		}},
		{"observer-panics", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			defer func() { o.err = fmt.Sprint(recover()) }()
			panicky := limit(t, keycap.Spec{Name: lim.Name(), Max: 1, TTL: time.Hour}, lim.Key()) // the observer panics on its SlotAcquired
			_ = l.Do(context.Background(), func(context.Context) error { o.ran = true; return nil }, panicky)
			return o
		}},
		{"closed", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			_ = l.Close()
			o.err = fmt.Sprint(l.Do(context.Background(), func(context.Context) error { o.ran = true; return nil }, lim))
			return o
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var got [2]outcome
			for i, pinned := range []bool{true, false} {
				var s keycap.Store = memstore.New()
				if !pinned {
					s = renewed{Store: memstore.New()}
				}
				rec := &keycaptest.Recorder{}
				obs := keycap.ObserverFunc(func(e keycap.Event) {
					rec.Observe(e)
					if e.Kind == keycap.SlotAcquired && e.Limit.Spec().TTL == time.Hour {
						panic("observer")
					}
				})
				l, err := keycap.NewLimiter(s, keycap.WithObserver(obs), keycap.WithOverrides(time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				lim := limit(t, keycap.Spec{Name: "pin", Max: 1}, "k")
				got[i] = sc.run(t, l, lim)
				for _, e := range rec.Events() {
					if e.Kind == keycap.SlotReleased && e.Held <= 0 {
						t.Errorf("pinned %v: %v held %v", pinned, e.Kind, e.Held)
					}
					got[i].events = append(got[i].events, fmt.Sprintf("%v %s/%s waited %v", e.Kind, e.Limit.Name(), e.Limit.Key(), e.Waited))
				}
				if sc.name != "closed" {
					// The pool is free again: taken by another Limiter on the store.
					l2, _ := newLimiter(t, s)
					acquire(t, l2, lim).Release()
				}
			}
			if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
				t.Errorf("pinned Do:  %+v\nleased Do: %+v", got[0], got[1])
			}
		})
	}
}

// TestDoPinsOnlyWhatItCan: Do pins one plain limit taken without waiting,
// and nothing else. Inside fn the store's clock moves a second: a pinned
// slot still shows its TTL as Expires, a lease's a second less.
func TestDoPinsOnlyWhatItCan(t *testing.T) {
	const ttl = time.Minute
	for _, tc := range []struct {
		name    string
		opts    []keycap.Option
		limit   keycap.Spec // beside Name, Max and TTL
		two     bool        // a second limit beside it
		shadow  bool        // look in the shadow pools
		pinned  bool
		inspect bool
	}{
		{name: "plain", pinned: true},
		{name: "wait", limit: keycap.Spec{Wait: time.Second}},
		{name: "weight", limit: keycap.Spec{Weight: 2}},
		{name: "shadow-limit", limit: keycap.Spec{Shadow: true}, shadow: true},
		{name: "shadow-mode", opts: []keycap.Option{keycap.WithShadowMode()}, shadow: true},
		{name: "two-limits", two: true},
		{name: "inspection", opts: []keycap.Option{keycap.WithInspection(keycap.InspectOptions{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now atomic.Int64
			s := memstore.New(testhook.MemstoreClock(func() time.Duration { return time.Duration(now.Load()) }).(memstore.Option))
			l, _ := newLimiter(t, s, tc.opts...)
			spec := tc.limit
			spec.Name, spec.Max, spec.TTL = "pins", 4, ttl
			limits := []keycap.Limit{limit(t, spec, "k")}
			if tc.two {
				limits = append(limits, limit(t, keycap.Spec{Name: "pins", Max: 4, TTL: ttl}, "other"))
			}
			err := l.Do(context.Background(), func(context.Context) error {
				now.Add(int64(time.Second))
				r, err := l.Inspect(context.Background(), keycap.Inspection{Name: "pins", Shadow: tc.shadow})
				if err != nil {
					return err
				}
				if len(r.Pools) != len(limits) {
					t.Fatalf("%d pools, want %d", len(r.Pools), len(limits))
				}
				for _, p := range r.Pools {
					if len(p.Holders) != 1 {
						t.Fatalf("pool %v: %d holders, want 1", p.Pool, len(p.Holders))
					}
					if h := p.Holders[0]; (h.Expires == ttl) != tc.pinned || !h.Here {
						t.Errorf("holder %+v: want pinned %v (Expires = TTL), here", h, tc.pinned)
					}
				}
				return nil
			}, limits...)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// leasedFaults is faultStore over memstore, which never blocks (InProcess);
// pinnedFaults is the same with memstore's Pinned feature, whose pinned
// Acquire fails while fail is set, as any Acquire of faultStore does.
type leasedFaults struct{ *faultStore }

func (leasedFaults) Features() store.Features { return store.InProcess }

type pinnedFaults struct{ leasedFaults }

func (pinnedFaults) Features() store.Features { return store.InProcess | store.Pinned }

// TestDoPinnedFailures runs Do on a store that pins and fails, pinned and leased:
// an acquire that fails open runs fn unguarded and one that fails closed
// returns a *StoreError, with the same events either way; a release that
// fails is retried until the store answers again.
func TestDoPinnedFailures(t *testing.T) {
	for _, mode := range []keycap.FailMode{keycap.FailOpen, keycap.FailClosed} {
		var got [2]string
		for i, pinned := range []bool{true, false} {
			f := newFaultStore()
			var s keycap.Store = pinnedFaults{leasedFaults{f}}
			if !pinned {
				s = leasedFaults{f}
			}
			l, rec := newLimiter(t, s)
			f.fail.Store(true)
			ran := false
			err := l.Do(context.Background(), func(context.Context) error { ran = true; return nil }, limit(t, keycap.Spec{Name: "fail", Max: 1, FailMode: mode}, "k"))
			var kinds []string
			for _, e := range rec.Events() {
				kinds = append(kinds, e.Kind.String())
			}
			got[i] = fmt.Sprintf("ran %v, err %v, events %v", ran, err, kinds)
		}
		if got[0] != got[1] {
			t.Errorf("%v: pinned %s\nleased %s", mode, got[0], got[1])
		}
		if mode == keycap.FailClosed && !strings.Contains(got[0], "ran false") || mode == keycap.FailOpen && !strings.Contains(got[0], "ran true") {
			t.Errorf("%v: %s", mode, got[0])
		}
	}

	// A release that fails is retried: the slot is free once the store
	// answers again.
	f := newFaultStore()
	l, rec := newLimiter(t, pinnedFaults{leasedFaults{f}})
	lim := limit(t, keycap.Spec{Name: "fail", Max: 1}, "release")
	if err := l.Do(context.Background(), func(context.Context) error { f.fail.Store(true); return nil }, lim); err != nil {
		t.Fatal(err)
	}
	if n := rec.Count(keycap.StoreFailed, ""); n != 1 {
		t.Fatalf("%d StoreFailed after a failed release, want 1", n)
	}
	f.fail.Store(false)
	other, _ := newLimiter(t, f.Store)
	// No event tells of the retry's success; its first interval is 50 ms.
	testkit.WaitUntil(t, 5*time.Second, "the failed release retried", func() bool {
		ls, err := other.Acquire(context.Background(), lim)
		if err == nil {
			ls.Release()
		}
		return err == nil
	})
}

// TestDoPinnedObserverPanicOnRecovery: an observer that panics on the
// StoreRecovered that Do's grant sends must not leave the pinned slot held
// (it would be held for good: it has no expiry).
func TestDoPinnedObserverPanicOnRecovery(t *testing.T) {
	f := newFaultStore()
	obs := keycap.ObserverFunc(func(e keycap.Event) {
		if e.Kind == keycap.StoreRecovered {
			panic("observer")
		}
	})
	l, err := keycap.NewLimiter(pinnedFaults{leasedFaults{f}}, keycap.WithObserver(obs), keycap.WithRecoverAfter(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	lim := limit(t, keycap.Spec{Name: "recover", Max: 1}, "k")
	f.fail.Store(true)
	_ = l.Do(context.Background(), func(context.Context) error { return nil }, lim) // opens the outage
	f.fail.Store(false)
	time.Sleep(2 * time.Millisecond) // past WithRecoverAfter: the next answer ends the outage
	func() {
		defer func() {
			if r := recover(); r != "observer" {
				t.Fatalf("recovered %v, want the observer's panic", r)
			}
		}()
		_ = l.Do(context.Background(), func(context.Context) error { return nil }, lim)
	}()
	other, _ := newLimiter(t, f.Store)
	acquire(t, other, lim).Release()
}
