package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/nullstore"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// TestHandoverReleasesWithoutWaiting: after a reload onto another Redis
// store, the Limiter's store still releases without its caller waiting
// (store.AsyncRelease), and keeps that promise in both stores: a slot
// released that way is free, in the old store as in the new, to the very
// next acquire — a pool of max 1 taken in turn by one owner after another
// is never refused. The old store is a Redis store (released the same way)
// or memstore (released before the new store's release is sent).
func TestHandoverReleasesWithoutWaiting(t *testing.T) {
	c := testenv.Redis(t)
	newRedis := func(name string) keycap.Store {
		s, err := redisstore.New(c, redisstore.WithPrefix(testenv.Prefix(t, c)+name+":"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, prev := range []struct {
		name  string
		store keycap.Store
	}{{"redis", newRedis("old")}, {"memory", memstore.New()}} {
		t.Run("after-"+prev.name, func(t *testing.T) {
			h := newHandover(newRedis("new-after-"+prev.name), prev.store)
			if !h.Features().Has(store.AsyncRelease) {
				t.Fatalf("the handover onto a Redis store does not release without waiting: features %v", h.Features())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pool := store.PoolOf(0, "handover", "async")
			answered := make(chan error, 200)
			for i := range 200 {
				o := store.NewOwner()
				g, err := h.Acquire(ctx, pool, o, store.Demand{Max: 1, TTL: time.Minute})
				if err != nil || !g.Granted {
					t.Fatalf("acquire %d after the previous one's release was sent: %+v %v", i, g, err)
				}
				h.ReleaseAsync(pool, o, store.Demand{}, time.Second, func(err error) { answered <- err })
			}
			for i := range 200 {
				select {
				case err := <-answered:
					if err != nil {
						t.Fatalf("release %d: %v", i, err)
					}
				case <-ctx.Done():
					t.Fatalf("%d of 200 releases answered", i)
				}
			}
			for name, s := range map[string]keycap.Store{"old": prev.store, "new": h.Store} {
				g, err := s.Acquire(ctx, pool, store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute})
				if err != nil || !g.Granted {
					t.Fatalf("the %s store still holds a slot after every release: %+v %v", name, g, err)
				}
			}
		})
	}
	if h := newHandover(memstore.New(), memstore.New()); h.Features().Has(store.AsyncRelease) {
		t.Fatal("a handover onto memstore claims to release without waiting")
	}
}

// TestHandoverKeepsPartitions: after a reload onto a Redis Cluster store, the
// Limiter still tells the cluster's masters apart (store.Partitions), so
// that one master's outage is reported once and not ended by another's
// answers.
func TestHandoverKeepsPartitions(t *testing.T) {
	c := testenv.RedisCluster(t)
	next, err := redisstore.New(c, redisstore.WithPrefix(testenv.Prefix(t, c)+"new:"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHandover(next, memstore.New())
	if !h.Features().Has(store.Partitions) {
		t.Fatalf("the handover onto a cluster has no partitions: features %v", h.Features())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The store learns the cluster's slot ranges in the background from
	// New on, and until then names no partition; a listing reads them
	// (CLUSTER SLOTS) when they are not known yet, so that from here on
	// the store's answer does not change between the two calls below.
	if _, err := next.InspectPools(ctx, store.PageQuery{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range 30 {
		pool := store.PoolOf(0, "handover", fmt.Sprint("parts-", i))
		want, got := next.Partition(pool), h.Partition(pool)
		if want == "" {
			t.Fatalf("pool %d: the store names no partition after listing its pools", i)
		}
		if got != want {
			t.Fatalf("pool %d: the handover says partition %q, the store %q", i, got, want)
		}
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Fatalf("partitions seen: %v, want the cluster's masters", seen)
	}
}

// bareStore has plain slots and no feature at all: store.Unsupported answers
// everything else.
type bareStore struct{ store.Unsupported }

func (bareStore) Acquire(context.Context, store.PoolID, store.Owner, store.Demand) (store.Grant, error) {
	return store.Grant{Granted: true}, nil
}

func (bareStore) Release(context.Context, store.PoolID, store.Owner, store.Demand, bool) (bool, error) {
	return false, nil
}

func (bareStore) Renew(context.Context, []store.Renewal) error { return nil }

// TestHandoverHasItsNewStoresFeatures: a handover declares exactly its new
// store's features, whatever the old store has, so that the Limiter never
// asks it for something the new store lacks (a line on nullstore), and a
// call to a feature the new store lacks answers store.ErrNotSupported.
func TestHandoverHasItsNewStoresFeatures(t *testing.T) {
	t.Parallel()
	for _, next := range []struct {
		name  string
		store store.Store
	}{{"memory", memstore.New()}, {"none", nullstore.New()}, {"bare", bareStore{}}} {
		for _, prev := range []struct {
			name  string
			store store.Store
		}{{"memory", memstore.New()}, {"none", nullstore.New()}, {"bare", bareStore{}}} {
			h := newHandover(next.store, prev.store)
			// The new store's, but pinned slots, and calls free of waits
			// only when the old store's are too.
			want := next.store.Features() &^ store.Pinned
			if !prev.store.Features().Has(store.InProcess) {
				want &^= store.InProcess
			}
			if got := h.Features(); got != want {
				t.Errorf("a handover from %s onto %s declares %v, want %v (its new store's: %v)", prev.name, next.name, got, want, next.store.Features())
			}
		}
	}
	if f := newHandover(bareStore{}, memstore.New()).Features(); f != 0 {
		t.Errorf("a handover onto a store of no feature declares %v", f)
	}

	h := newHandover(nullstore.New(), memstore.New())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stop, err := h.Notify(ctx, store.PoolOf(0, "handover", "notify"), func([]store.Owner) {})
	if !errors.Is(err, store.ErrNotSupported) {
		t.Fatalf("a handover onto nullstore answers Notify with %v, want an error matching store.ErrNotSupported", err)
	}
	if stop != nil {
		stop()
	}
}
