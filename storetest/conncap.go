package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/store"
)

// testConnCaps checks connection caps (conncap on a store with
// store.Members) across nodes: every node is a Limiter of its own, on a
// client of its own, as separate servers are.
func testConnCaps(t *testing.T, ns Namespace) {
	if !ns(t)().Features().Has(store.Members) {
		t.Skip("the store keeps no members (store.Members)")
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, open func() keycap.Store)
	}{
		{"ExactAcrossNodes", testConnExact},
		{"DeadNodeExpires", testConnDeadNode},
		{"GhostReclaimedOnTheNextHeartbeat", testConnGhost},
		{"CloseWithdrawsTheNode", testConnClose},
		{"AnyUserID", testConnUserIDs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, ns(t))
		})
	}
}

// connNode starts a node on s: a Limiter with its own node name and
// heartbeat (none when beat is 0) and a conncap.Cap on it, closed when the
// test ends.
func connNode(t *testing.T, s keycap.Store, beat time.Duration, opts ...conncap.Option) *conncap.Cap {
	t.Helper()
	c, _ := connNodeObserved(t, s, beat, opts...)
	return c
}

// connNodeObserved is connNode with the events its Limiter reports.
func connNodeObserved(t *testing.T, s keycap.Store, beat time.Duration, opts ...conncap.Option) (*conncap.Cap, *events) {
	t.Helper()
	ev := &events{}
	lopts := []keycap.Option{keycap.WithDecisionBudget(10 * time.Second), keycap.WithObserver(ev)}
	if beat > 0 {
		lopts = append(lopts, keycap.WithHeartbeat(beat))
	}
	l, err := keycap.NewLimiter(s, lopts...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := conncap.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = l.Close()
	})
	return c, ev
}

// events counts a Limiter's events by kind.
type events struct {
	mu sync.Mutex
	n  map[keycap.EventKind]int
}

func (e *events) Observe(ev keycap.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[keycap.EventKind]int{}
	}
	e.n[ev.Kind]++
}

func (e *events) count(k keycap.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[k]
}

func admit(t *testing.T, c *conncap.Cap, user, conn string) error {
	return c.Admit(ctx(t), "app", user, conn)
}

// testConnExact: 50 concurrent admissions of one user, cap 5, from 3 nodes:
// exactly 5 are admitted.
func testConnExact(t *testing.T, open func() keycap.Store) {
	nodes := make([]*conncap.Cap, 3)
	for i := range nodes {
		nodes[i] = connNode(t, open(), 0, conncap.WithDefaultCap(5))
	}
	var admitted, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			err := admit(t, nodes[i%3], "alice", fmt.Sprint("sock", i))
			switch {
			case err == nil:
				admitted.Add(1)
			case errors.Is(err, conncap.ErrOverCap):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 5 || refused.Load() != 45 {
		t.Fatalf("%d admitted, %d refused; want exactly 5 and 45", admitted.Load(), refused.Load())
	}
}

// testConnDeadNode: a node that stops heart-beating loses its connections
// within the TTL; one that keeps heart-beating keeps them past it.
func testConnDeadNode(t *testing.T, open func() keycap.Store) {
	const beat, ttl = 200 * time.Millisecond, 1500 * time.Millisecond
	opts := []conncap.Option{conncap.WithDefaultCap(2), conncap.WithSpec(keycap.Spec{TTL: ttl})}
	alive := connNode(t, open(), beat, opts...)
	other := connNode(t, open(), beat, opts...)
	dyingLimiter, err := keycap.NewLimiter(open(), keycap.WithHeartbeat(beat), keycap.WithDecisionBudget(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dyingLimiter.Close() }) // closed below; again on an early failure
	dying, err := conncap.New(dyingLimiter, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := admit(t, alive, "alice", "a"); err != nil {
		t.Fatal(err)
	}
	if err := admit(t, dying, "alice", "d"); err != nil {
		t.Fatal(err)
	}
	if err := admit(t, other, "alice", "o"); !errors.Is(err, conncap.ErrOverCap) {
		t.Fatalf("cap reached: %v", err)
	}
	_ = dyingLimiter.Close() // the node dies: no heartbeat, no release
	start := time.Now()
	for admit(t, other, "alice", "o") != nil {
		if time.Since(start) > ttl+time.Second {
			t.Fatalf("the dead node's connection still counts %s later (TTL %s)", time.Since(start), ttl)
		}
		time.Sleep(20 * time.Millisecond) // expiry is time passing
	}
	if el := time.Since(start); el > ttl+500*time.Millisecond {
		t.Errorf("freed after %s, later than the TTL of %s", el, ttl)
	}
	// The live node's connection, older than the TTL, still counts.
	if err := admit(t, other, "alice", "o2"); !errors.Is(err, conncap.ErrOverCap) {
		t.Fatalf("the live node's connection was lost: %v", err)
	}
}

// lossy drops releases on the floor, as a release that never reached the
// store would: both ways of releasing, since it forwards everything else,
// the inner store's Features (AsyncRelease among them) included.
type lossy struct {
	keycap.Store
	drop atomic.Bool
}

func (l *lossy) Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	if l.drop.Load() {
		return false, nil
	}
	return l.Store.Release(ctx, pool, owner, d, leave)
}

func (l *lossy) ReleaseAsync(pool store.PoolID, owner store.Owner, d store.Demand, budget time.Duration, done func(error)) {
	if l.drop.Load() {
		done(nil)
		return
	}
	l.Store.ReleaseAsync(pool, owner, d, budget, done)
}

// testConnGhost: a release that never reached the store holds a slot until
// the node's next heartbeat, not longer; and a user whose connections all
// left holds nothing.
func testConnGhost(t *testing.T, open func() keycap.Store) {
	st := &lossy{Store: open()}
	c, ev := connNodeObserved(t, st, time.Hour, conncap.WithDefaultCap(1), conncap.WithSpec(keycap.Spec{TTL: 2 * time.Hour}))
	if err := admit(t, c, "alice", "s1"); err != nil {
		t.Fatal(err)
	}
	st.drop.Store(true)
	c.Leave("app", "s1") // lost on the way
	st.drop.Store(false)
	if err := admit(t, c, "alice", "s2"); !errors.Is(err, conncap.ErrOverCap) {
		t.Fatalf("the ghost should hold the slot until the heartbeat: %v", err)
	}
	if err := c.Heartbeat(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := ev.count(keycap.GhostsDropped); n != 1 {
		t.Fatalf("%d GhostsDropped events after the heartbeat, want 1", n)
	}
	if err := admit(t, c, "alice", "s2"); err != nil {
		t.Fatalf("after the heartbeat: %v", err)
	}
	c.Leave("app", "s2")
	if err := c.Heartbeat(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := held(t, st.Store, store.PoolOf(byte(keycap.FamilyConn), "app", "alice"), 10); n != 0 {
		t.Fatalf("a user with no connections holds %d slots", n)
	}
}

// testConnClose: closing a node frees its connections at once.
func testConnClose(t *testing.T, open func() keycap.Store) {
	a := connNode(t, open(), 0, conncap.WithDefaultCap(1))
	b := connNode(t, open(), 0, conncap.WithDefaultCap(1))
	if err := admit(t, a, "alice", "s"); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := admit(t, a, "alice", "t"); !errors.Is(err, keycap.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := admit(t, b, "alice", "t"); err != nil {
		t.Fatalf("the closed node's slot is not free: %v", err)
	}
}

// testConnUserIDs: user ids that look like keys, patterns or commands each
// get a pool of their own.
func testConnUserIDs(t *testing.T, open func() keycap.Store) {
	c := connNode(t, open(), 0, conncap.WithDefaultCap(1))
	ids := []string{"evil:admin", "evil", "u*", "{app}:x", "\x00", "", "a\r\nDEL *", "1", "01"}
	for i, id := range ids {
		if err := admit(t, c, id, fmt.Sprint("s", i)); err != nil {
			t.Fatalf("user %q: %v", id, err)
		}
	}
	for i, id := range ids {
		if err := admit(t, c, id, fmt.Sprint("t", i)); !errors.Is(err, conncap.ErrOverCap) {
			t.Fatalf("user %q shares a pool with another id: %v", id, err)
		}
	}
}
