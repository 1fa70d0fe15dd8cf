package redisstore

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
)

// KEYCAP_LANES sets the lanes of one Redis and of each cluster node, to
// measure other counts.
func init() {
	if n, err := strconv.Atoi(os.Getenv("KEYCAP_LANES")); err == nil && n > 0 {
		lanes, clusterLanes = n, n
	}
}

// TestPoolNamesMatchKey checks the names the calls build in one buffer:
// the pool's key is Key's, its line's and channel's share its hash tag, and
// the owner follows, for a short prefix (in the buffer) and a long one (on
// the heap).
func TestPoolNamesMatchKey(t *testing.T) {
	for _, prefix := range []string{"", "app:", strings.Repeat("p", 64) + ":"} {
		s := &Store{prefix: prefix}
		pool := keycap.NewPoolID("names", prefix)
		owner := keycap.NewOwner()
		var n poolNames
		n.fill(prefix, pool, owner)
		tag := "{" + pool.String() + "}"
		want := []string{s.Key(pool), prefix + "keycap:line:" + tag, prefix + "keycap:lmeta:" + tag}
		if !slices.Equal(n.keys[:], want) || n.channel != prefix+"keycap:wake:"+tag || n.owner != string(owner[:]) {
			t.Errorf("prefix %q: built %q %q %x, want %q %q %x", prefix, n.keys, n.channel, n.owner, want, prefix+"keycap:wake:"+tag, owner[:])
		}
	}
}

// TestClusterLaneKeptWhileBusy: a release sent on a cluster before its slot
// ranges were known waits in a shared lane; once they are known, the next
// acquire of the same pool must queue behind it, not go at once on its
// node's queue and find the slot still held.
func TestClusterLaneKeptWhileBusy(t *testing.T) {
	c := testenv.RedisCluster(t)
	s, err := New(c, WithPrefix(testenv.Prefix(t, c)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// New reads the ranges in the background: wait for them, then forget
	// them, as just after New.
	for s.slots.ranges.Load() == nil {
		select {
		case <-ctx.Done():
			t.Fatal("the slot ranges were not read within 10s")
		case <-time.After(time.Millisecond): // no signal tells of them
		}
	}
	ranges := s.slots.ranges.Load()
	s.slots.ranges.Store(nil)
	pool := keycap.NewPoolID("lane-kept", t.Name())
	first, second := keycap.NewOwner(), keycap.NewOwner()
	if ok, err := s.Acquire(ctx, pool, first, 1, time.Minute); !ok || err != nil {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	// The shared lane is busy: what is queued in it waits, in order.
	q := lane(s.queues.single, pool)
	q.mu.Lock()
	q.running = true
	q.mu.Unlock()
	released := make(chan error, 1)
	s.ReleaseAsync(pool, first, 0, func(err error) { released <- err })
	s.slots.ranges.Store(ranges)

	type result struct {
		ok  bool
		err error
	}
	acquired := make(chan result, 1)
	go func() {
		ok, err := s.Acquire(ctx, pool, second, 1, time.Minute)
		acquired <- result{ok, err}
	}()
	queued := func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.ops) == 2
	}
	for !queued() {
		select {
		case r := <-acquired:
			t.Fatalf("the acquire did not wait behind the release: Acquire = %v, %v", r.ok, r.err)
		case <-ctx.Done():
			t.Fatal("the acquire was not queued within 10s")
		case <-time.After(time.Millisecond): // no signal tells of an op queued
		}
	}
	go q.run() // the lane's sender: release, then acquire
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("release: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the release was not answered within 10s")
	}
	select {
	case r := <-acquired:
		if !r.ok || r.err != nil {
			t.Fatalf("Acquire after the release = %v, %v; want the slot", r.ok, r.err)
		}
	case <-ctx.Done():
		t.Fatal("the acquire was not answered within 10s")
	}
	// Once idle (the sender lets go of the lane after it answered), the
	// pool's next call retires the shared lane and goes on its node's queue.
	for {
		q.mu.Lock()
		idle := !q.running
		q.mu.Unlock()
		if idle {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the shared lane was not idle within 10s")
		case <-time.After(time.Millisecond): // no signal tells of it
		}
	}
	if err := s.Release(ctx, pool, second); err != nil {
		t.Fatal(err)
	}
	if !q.retired.Load() {
		t.Fatal("the idle shared lane was not retired once the ranges were known")
	}
}
