package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/redisstore"
)

// TestHandoverReleasesWithoutWaiting: after a reload onto another Redis
// store, the Limiter's store still releases without its caller waiting
// (keycap.AsyncReleaser), and keeps that promise in both stores: a slot
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
			store, ok := h.store().(keycap.AsyncReleaser)
			if !ok {
				t.Fatalf("the handover onto a Redis store is not a keycap.AsyncReleaser")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pool := keycap.NewPoolID("handover", "async")
			answered := make(chan error, 200)
			for i := range 200 {
				o := keycap.NewOwner()
				ok, err := h.Acquire(ctx, pool, o, 1, time.Minute)
				if err != nil || !ok {
					t.Fatalf("acquire %d after the previous one's release was sent: %v %v", i, ok, err)
				}
				store.ReleaseAsync(pool, o, time.Second, func(err error) { answered <- err })
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
				if ok, err := s.Acquire(ctx, pool, keycap.NewOwner(), 1, time.Minute); err != nil || !ok {
					t.Fatalf("the %s store still holds a slot after every release: %v %v", name, ok, err)
				}
			}
		})
	}
	if _, ok := newHandover(memstore.New(), memstore.New()).store().(keycap.AsyncReleaser); ok {
		t.Fatal("a handover onto memstore claims to release without waiting")
	}
}

// TestHandoverKeepsPartitions: after a reload onto a Redis Cluster store, the
// Limiter still tells the cluster's masters apart (keycap.Partitioner), so
// that one master's outage is reported once and not ended by another's
// answers.
func TestHandoverKeepsPartitions(t *testing.T) {
	c := testenv.RedisCluster(t)
	next, err := redisstore.New(c, redisstore.WithPrefix(testenv.Prefix(t, c)+"new:"))
	if err != nil {
		t.Fatal(err)
	}
	parts, ok := newHandover(next, memstore.New()).store().(keycap.Partitioner)
	if !ok {
		t.Fatal("the handover is not a keycap.Partitioner")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[string]bool{}
	for i := range 30 {
		pool := keycap.NewPoolID("handover", fmt.Sprint("parts-", i))
		if _, err := next.Acquire(ctx, pool, keycap.NewOwner(), 1, time.Minute); err != nil { // learns the slot ranges
			t.Fatal(err)
		}
		got, want := parts.Partition(pool), next.Partition(pool)
		if got != want {
			t.Fatalf("pool %d: the handover says partition %q, the store %q", i, got, want)
		}
		if got != "" { // "" until the store has learnt the slot ranges
			seen[got] = true
		}
	}
	if len(seen) < 2 {
		t.Fatalf("partitions seen: %v, want the cluster's masters", seen)
	}
}
