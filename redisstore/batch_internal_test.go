package redisstore

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/store"
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
		pool := store.PoolOf(0, "names", prefix)
		owner := store.NewOwner()
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
	testkit.WaitUntil(t, 10*time.Second, "the slot ranges", func() bool { return s.slots.ranges.Load() != nil })
	ranges := s.slots.ranges.Load()
	s.slots.ranges.Store(nil)
	pool := store.PoolOf(0, "lane-kept", t.Name())
	first, second := store.NewOwner(), store.NewOwner()
	if g, err := s.Acquire(ctx, pool, first, store.Demand{Max: 1, TTL: time.Minute}); !g.Granted || err != nil {
		t.Fatalf("Acquire = %v, %v", g.Granted, err)
	}
	// The shared lane is busy: what is queued in it waits, in order.
	q := lane(s.queues.single, pool)
	locked := func(f func()) {
		q.mu.Lock()
		defer q.mu.Unlock()
		f()
	}
	locked(func() { q.running = true })
	released := make(chan error, 1)
	s.ReleaseAsync(pool, first, store.Demand{}, 0, func(err error) { released <- err })
	s.slots.ranges.Store(ranges)

	type result struct {
		ok  bool
		err error
	}
	acquired := make(chan result, 1)
	go func() {
		g, err := s.Acquire(ctx, pool, second, store.Demand{Max: 1, TTL: time.Minute})
		acquired <- result{g.Granted, err}
	}()
	testkit.WaitUntil(t, 10*time.Second, "the acquire queued behind the release", func() bool {
		select {
		case r := <-acquired:
			t.Fatalf("the acquire did not wait behind the release: Acquire = %v, %v", r.ok, r.err)
		default:
		}
		n := 0
		locked(func() { n = len(q.ops) })
		return n == 2
	})
	go q.run() // the lane's sender: release, then acquire
	if err := testkit.Recv(t, released, 10*time.Second, "the release's answer"); err != nil {
		t.Fatalf("release: %v", err)
	}
	if r := testkit.Recv(t, acquired, 10*time.Second, "the acquire's answer"); !r.ok || r.err != nil {
		t.Fatalf("Acquire after the release = %v, %v; want the slot", r.ok, r.err)
	}
	// Once idle (the sender lets go of the lane after it answered), the
	// pool's next call retires the shared lane and goes on its node's queue.
	testkit.WaitUntil(t, 10*time.Second, "the shared lane idle", func() bool {
		idle := false
		locked(func() { idle = !q.running })
		return idle
	})
	if _, err := s.Release(ctx, pool, second, store.Demand{}, false); err != nil {
		t.Fatal(err)
	}
	if !q.retired.Load() {
		t.Fatal("the idle shared lane was not retired once the ranges were known")
	}
}
