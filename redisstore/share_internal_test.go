package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/store"
)

// TestParentsDoNotShareVirtualTime: a call on one parent starts from that
// parent's virtual time. share.lua read it once per call into a local of
// the function library, which outlives the call on Redis 7: the next call
// on any parent started from it, and moved that parent's time to it.
func TestParentsDoNotShareVirtualTime(t *testing.T) {
	c := testenv.Redis(t)
	s, err := New(c, WithPrefix(testenv.Prefix(t, c)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	demand := func(parent string) store.Demand {
		return store.Demand{Max: 1, TTL: time.Minute, Shared: &store.Shared{Weight: 1,
			Parent: store.Parent{Pool: store.PoolOf(store.Internal, "vt-parent", parent), Max: 2, Share: 1}}}
	}
	acquire := func(parent, key string, o store.Owner) {
		t.Helper()
		g, err := s.Acquire(ctx, store.PoolOf(store.Internal, "vt-key", parent+key), o, demand(parent))
		if err != nil || !g.Granted {
			t.Fatalf("Acquire on %s: %v, %v", parent, g, err)
		}
	}
	// Parent a's time moves an hour ahead: a key charged an hour of
	// slot-time is served again.
	o := store.NewOwner()
	acquire("a", "1", o)
	d := demand("a")
	d.Held = time.Hour
	if _, err := s.Release(ctx, store.PoolOf(store.Internal, "vt-key", "a1"), o, d, false); err != nil {
		t.Fatal(err)
	}
	acquire("a", "1", store.NewOwner())
	// Parent b has served nobody yet.
	acquire("b", "1", store.NewOwner())
	for parent, want := range map[string]bool{"a": true, "b": false} {
		keys, _, _ := s.shareNames(store.PoolOf(store.Internal, "vt-parent", parent))
		v, err := c.HGet(ctx, keys[5], "V").Result()
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := strconv.ParseFloat(v, 64)
		if ahead := ms >= float64(time.Hour/time.Millisecond); ahead != want {
			t.Fatalf("parent %s's virtual time %s ms: an hour ahead %v, want %v", parent, v, ahead, want)
		}
	}
}
