package memstore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap/store"
)

// TestIdleKeysAreForgotten: one-off keys of a parent (each served once,
// then gone) leave no state once they have been idle for forgetAfter,
// though each ended ahead of the parent's virtual time.
func TestIdleKeysAreForgotten(t *testing.T) {
	var clock atomic.Int64
	clock.Store(int64(time.Hour))
	s := New(withClock(func() time.Duration { return time.Duration(clock.Load()) }))
	parent := store.PoolOf(store.Internal, "forget", "")
	// A holder keeps the parent alive throughout (the shard's sweep drops a
	// parent with nothing live, and every account with it).
	holder := demand{Pool: store.PoolOf(store.Internal, "forget-key", "holder"), Owner: store.NewOwner(), Demand: store.Demand{Max: 1, TTL: time.Hour,
		Shared: &store.Shared{Weight: 1, Parent: store.Parent{Pool: parent, Max: 10, Share: 1}}}}
	if !s.acquireShared(holder, nil).Granted {
		t.Fatal("the holder was refused")
	}
	const keys = 1000
	for i := range keys {
		pool := store.PoolOf(store.Internal, "forget-key", fmt.Sprint(i))
		d := demand{Pool: pool, Owner: store.NewOwner(), Demand: store.Demand{Max: 1, TTL: time.Second,
			Shared: &store.Shared{Weight: 1, Parent: store.Parent{Pool: parent, Max: 10, Share: 1}}}}
		if !s.acquireShared(d, nil).Granted {
			t.Fatalf("key %d refused", i)
		}
		d.Held = 5 * time.Millisecond // ends ahead of the parent's time: an account is kept
		s.releaseShared(d, false)
		clock.Add(int64(time.Millisecond))
	}
	kids := func() int {
		sh := s.shard(parent)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return len(sh.parents[parent].kids)
	}
	if n := kids(); n < keys/2 {
		t.Fatalf("%d of %d one-off keys keep an account before any is idle for %s: the test sees nothing", n, keys, forgetAfter)
	}
	clock.Add(int64(forgetAfter + 2*time.Second)) // past every lease's expiry and the forgetting
	d := demand{Pool: store.PoolOf(store.Internal, "forget-key", "last"), Owner: store.NewOwner(), Demand: store.Demand{Max: 1, TTL: time.Second,
		Shared: &store.Shared{Weight: 1, Parent: store.Parent{Pool: parent, Max: 10, Share: 1}}}}
	s.acquireShared(d, nil)
	if n := kids(); n > 2 {
		t.Fatalf("%d keys keep an account after %s idle, want only the holder's and the last one's", n, forgetAfter)
	}
}
