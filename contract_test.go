package keycap_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// TestNilLease: a nil *Lease (what Acquire returns with an error) answers
// every method without a panic: Release does nothing, Lost is a nil
// channel (which never closes), Guarded is false, Limits is empty.
func TestNilLease(t *testing.T) {
	t.Parallel()
	var ls *keycap.Lease
	ls.Release()
	ls.Release() // twice, as a deferred Release after an explicit one
	if ch := ls.Lost(); ch != nil {
		t.Errorf("Lost of a nil lease = %v, want a nil channel", ch)
	}
	if ls.Guarded() {
		t.Error("a nil lease is guarded")
	}
	if lims := ls.Limits(); len(lims) != 0 {
		t.Errorf("Limits of a nil lease = %v, want none", lims)
	}
}

// TestReadmePatternOnAFullPool runs the README's pattern with the pool
// full: Acquire's lease is nil, and its deferred Release does not panic.
func TestReadmePatternOnAFullPool(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memstore.New())
	ctx := context.Background()
	exports := keycap.Spec{Name: "exports", Max: 2}.For("user:42")
	for range 2 {
		defer acquire(t, limiter, exports).Release()
	}
	refusedSeen := false
	func() {
		lease, err := limiter.Acquire(ctx, exports)
		if errors.Is(err, keycap.ErrLimitExceeded) {
			refusedSeen = true
		}
		defer lease.Release()
		if lease != nil {
			t.Errorf("Acquire on a full pool returned a lease (err %v)", err)
		}
	}()
	if !refusedSeen {
		t.Fatal("Acquire on a full pool was not refused with ErrLimitExceeded")
	}
}

// calls counts what reaches a store from a Limiter.
type calls struct {
	acquires atomic.Int64 // Acquire calls
	lined    atomic.Int64 // ... with a ticket (Demand.Line)
	optional atomic.Int64 // calls of an optional method (a feature's)
}

func (c *calls) acquire(d store.Demand) {
	c.acquires.Add(1)
	if d.Line != (store.Ticket{}) {
		c.lined.Add(1)
	}
}

// minimalStore is the least a store can be: store.Unsupported, which
// declares no feature, and Acquire, Release and Renew (memstore's).
type minimalStore struct {
	store.Unsupported
	inner *memstore.Store
	c     *calls
}

func (s minimalStore) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	s.c.acquire(d)
	return s.inner.Acquire(ctx, pool, owner, d)
}

func (s minimalStore) Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	return s.inner.Release(ctx, pool, owner, d, leave)
}

func (s minimalStore) Renew(ctx context.Context, batch []store.Renewal) error {
	return s.inner.Renew(ctx, batch)
}

// hiddenFeatures is memstore with its features hidden: it has the methods
// of every feature, but declares none, so that the Limiter must call none
// of them.
type hiddenFeatures struct {
	*memstore.Store
	c *calls
}

func (hiddenFeatures) Features() store.Features { return 0 }

func (s hiddenFeatures) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	s.c.acquire(d)
	return s.Store.Acquire(ctx, pool, owner, d)
}

func (s hiddenFeatures) Notify(ctx context.Context, p store.PoolID, fn func([]store.Owner)) (func(), error) {
	s.c.optional.Add(1)
	return s.Store.Notify(ctx, p, fn)
}

func (s hiddenFeatures) InspectPools(ctx context.Context, q store.PageQuery) (store.PoolPage, error) {
	s.c.optional.Add(1)
	return s.Store.InspectPools(ctx, q)
}

func (s hiddenFeatures) SetOverride(ctx context.Context, o store.Override) error {
	s.c.optional.Add(1)
	return s.Store.SetOverride(ctx, o)
}

func (s hiddenFeatures) DeleteOverride(ctx context.Context, p store.PoolID) error {
	s.c.optional.Add(1)
	return s.Store.DeleteOverride(ctx, p)
}

func (s hiddenFeatures) Overrides(ctx context.Context, since uint64) (uint64, []store.Override, error) {
	s.c.optional.Add(1)
	return s.Store.Overrides(ctx, since)
}

func (s hiddenFeatures) Sync(ctx context.Context, n store.NodeID, ttl time.Duration, b []store.SyncPool) error {
	s.c.optional.Add(1)
	return s.Store.Sync(ctx, n, ttl, b)
}

// TestStoreWithoutFeatures: on a store that declares no feature, plain
// limits work, a Wait is served by polling (no ticket is ever asked for),
// a weight or a parent, an inspection and an override are refused with
// ErrNotSupported without a store call, and a Limiter WithOverrides cannot
// be built.
func TestStoreWithoutFeatures(t *testing.T) {
	t.Parallel()
	for name, newStore := range map[string]func(*calls) keycap.Store{
		"store.Unsupported": func(c *calls) keycap.Store { return minimalStore{inner: memstore.New(), c: c} },
		"hidden features":   func(c *calls) keycap.Store { return hiddenFeatures{Store: memstore.New(), c: c} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := &calls{}
			st := newStore(c)
			if f := st.Features(); f != 0 {
				t.Fatalf("Features = %s, want none", f)
			}
			l, _ := newLimiter(t, st)
			l.SetPollInterval(10 * time.Millisecond)
			ctx := context.Background()

			// A weight or a parent needs Shares: refused before any store
			// call, by Acquire and Do alike.
			for _, lim := range []keycap.Limit{
				keycap.Spec{Name: "shared", Max: 3, Weight: 2}.For("k"),
				keycap.Spec{Name: "shared", Max: 3, Parent: keycap.MustParent("features-parent", 3)}.For("k"),
			} {
				_, err := l.Acquire(ctx, lim)
				var nse *store.NotSupportedError
				if !errors.Is(err, keycap.ErrNotSupported) || !errors.As(err, &nse) || nse.Feature != store.Shares {
					t.Errorf("Acquire %s: %v, want ErrNotSupported naming shares", lim, err)
				}
				ran := false
				if err := l.Do(ctx, func(context.Context) error { ran = true; return nil }, lim); !errors.Is(err, keycap.ErrNotSupported) || ran {
					t.Errorf("Do %s: %v (ran %v), want ErrNotSupported without running", lim, err, ran)
				}
			}
			if n := c.acquires.Load(); n != 0 {
				t.Fatalf("%d store calls for limits the store cannot take", n)
			}

			// Inspection and overrides: not supported.
			if _, err := l.Inspect(ctx, keycap.Inspection{Name: "plain"}); !errors.Is(err, keycap.ErrNotSupported) {
				t.Errorf("Inspect: %v, want ErrNotSupported", err)
			}
			if err := l.SetOverride(ctx, keycap.Override{Name: "plain", Key: "k", Max: 5}); !errors.Is(err, keycap.ErrNotSupported) {
				t.Errorf("SetOverride: %v, want ErrNotSupported", err)
			}
			if err := l.ResetOverride(ctx, keycap.FamilyApp, "plain", "k"); !errors.Is(err, keycap.ErrNotSupported) {
				t.Errorf("ResetOverride: %v, want ErrNotSupported", err)
			}
			if _, err := l.Overrides(ctx); !errors.Is(err, keycap.ErrNotSupported) {
				t.Errorf("Overrides: %v, want ErrNotSupported", err)
			}
			if ol, err := keycap.NewLimiter(st, keycap.WithOverrides(time.Second)); !errors.Is(err, keycap.ErrNotSupported) {
				if ol != nil {
					_ = ol.Close()
				}
				t.Errorf("NewLimiter WithOverrides: %v, want ErrNotSupported", err)
			}

			// A plain limit works; one with a Wait polls. The slot is
			// freed through another Limiter, whose release wakes nobody
			// here: only a poll can find it.
			lim := keycap.Spec{Name: "plain", Max: 1, Wait: 10 * time.Second}.For("k")
			other, _ := newLimiter(t, st)
			holder := acquire(t, other, lim)
			before := c.acquires.Load()
			got := make(chan error, 1)
			go func() {
				ls, err := l.Acquire(ctx, lim)
				if err == nil {
					ls.Release()
				}
				got <- err
			}()
			testkit.WaitUntil(t, 5*time.Second, "the waiter to poll the full pool", func() bool {
				return c.acquires.Load() >= before+2
			})
			holder.Release()
			if err := testkit.Recv(t, got, 5*time.Second, "the polling waiter"); err != nil {
				t.Fatalf("the waiter: %v", err)
			}
			if n := c.lined.Load(); n != 0 {
				t.Errorf("%d acquires with a ticket on a store without lines", n)
			}
			if n := c.optional.Load(); n != 0 {
				t.Errorf("%d calls of a feature the store does not declare", n)
			}
		})
	}
}
