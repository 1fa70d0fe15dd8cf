package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// TestBestPassesAMemberWithoutAccount: the fair-share queue holds a key's
// member that the key's account does not name. best() took the key at the
// head out through the account alone, so it met the same member again and
// again, and the call never ended: Redis answered BUSY to every client,
// and UNKILLABLE to FUNCTION KILL, until SHUTDOWN NOSAVE (a soak of
// internal/safety hung so, cause not reproduced). On a Redis of its own:
// should this regress, the call times out and that Redis is killed.
func TestBestPassesAMemberWithoutAccount(t *testing.T) {
	p := testenv.StartRedis(t)
	c := redis.NewClient(p.Options())
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	parent := store.PoolOf(store.Internal, "stray-parent", "")
	keys, _, _ := s.shareNames(parent)
	stray := store.PoolOf(store.Internal, "stray-key", "without account")
	member := fmt.Sprintf("%016x%016x", 0, 1) + stray.String()
	if err := c.ZAdd(ctx, keys[3], redis.Z{Score: 0, Member: member}).Err(); err != nil {
		t.Fatal(err)
	}
	d := store.Demand{Max: 1, TTL: time.Minute, Shared: &store.Shared{Weight: 1, Parent: store.Parent{Pool: parent, Max: 2, Share: 1}}}
	g, err := s.Acquire(ctx, store.PoolOf(store.Internal, "stray-key", "caller"), store.NewOwner(), d)
	if err != nil || !g.Granted {
		t.Fatalf("a fresh caller with room, beside the stray member: %+v, %v", g, err)
	}
	if n, err := c.ZCard(ctx, keys[3]).Result(); err != nil || n != 0 {
		t.Fatalf("the stray member is still queued (%d members, %v)", n, err)
	}
}
