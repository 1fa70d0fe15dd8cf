package conncap_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/redisstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// backend opens stores of one fresh namespace: each call is a node with its
// own client.
type backend struct {
	name string
	open func(t *testing.T) func() keycap.Store
}

var backends = []backend{
	{"memstore", func(t *testing.T) func() keycap.Store {
		s := memstore.New()
		return func() keycap.Store { return s }
	}},
	{"redis", func(t *testing.T) func() keycap.Store {
		prefix := testenv.Prefix(t, testenv.Redis(t))
		return func() keycap.Store { return mustRedis(t, testenv.Redis(t), prefix) }
	}},
	{"cluster", func(t *testing.T) func() keycap.Store {
		prefix := testenv.Prefix(t, testenv.RedisCluster(t))
		return func() keycap.Store { return mustRedis(t, testenv.RedisCluster(t), prefix) }
	}},
}

func mustRedis(t *testing.T, c redis.UniversalClient, prefix string) keycap.Store {
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func forEachBackend(t *testing.T, fn func(t *testing.T, open func() keycap.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.open(t))
		})
	}
}

type recorder struct {
	mu     sync.Mutex
	events []conncap.Event
}

func (r *recorder) ObserveConn(e conncap.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) count(k conncap.EventKind) (n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func newNode(t *testing.T, s keycap.Store, opts ...conncap.Option) (*conncap.Cap, *recorder) {
	t.Helper()
	rec := &recorder{}
	c, err := conncap.New(s, append([]conncap.Option{conncap.WithObserver(rec)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, rec
}

func admit(c *conncap.Cap, user, conn string) error {
	return c.Admit(context.Background(), "app", user, conn)
}

func TestCap(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() keycap.Store) {
		c, rec := newNode(t, open(), conncap.WithDefaultCap(2), conncap.WithAppCap("open", 0))
		for i := range 2 {
			if err := admit(c, "alice", fmt.Sprint("s", i)); err != nil {
				t.Fatal(err)
			}
		}
		err := admit(c, "alice", "s2")
		var oce *conncap.OverCapError
		if !errors.As(err, &oce) || !errors.Is(err, conncap.ErrOverCap) || oce.Cap != 2 || oce.User != "alice" {
			t.Fatalf("third connection: %v", err)
		}
		if err := admit(c, "alice", "s1"); err != nil {
			t.Fatalf("admitting a connection again must succeed: %v", err)
		}
		if err := admit(c, "bob", "s1"); err == nil {
			t.Fatal("a connection admitted for alice was admitted for bob")
		}
		if err := admit(c, "bob", "b0"); err != nil {
			t.Fatalf("another user: %v", err)
		}
		for i := range 10 {
			if err := c.Admit(context.Background(), "open", "alice", fmt.Sprint("o", i)); err != nil {
				t.Fatalf("an app with cap 0 is not capped: %v", err)
			}
		}
		c.Leave("app", "s0")
		c.Leave("app", "s0") // twice: nothing more
		c.Leave("app", "never")
		if err := admit(c, "alice", "s2"); err != nil {
			t.Fatalf("after a connection left: %v", err)
		}
		if rec.count(conncap.Refused) != 1 || rec.count(conncap.Left) != 1 {
			t.Fatalf("events: %+v", rec.events)
		}
	})
}

func TestOptionsNameTheField(t *testing.T) {
	t.Parallel()
	for field, opt := range map[string]conncap.Option{
		"default cap":    conncap.WithDefaultCap(-1),
		`cap of app "x"`: conncap.WithAppCap("x", -2),
		"heartbeat":      conncap.WithHeartbeat(0, time.Minute),
		"ttl":            conncap.WithHeartbeat(time.Minute, time.Minute),
	} {
		_, err := conncap.New(memstore.New(), opt)
		var ie *keycap.InvalidLimitError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
	type plain struct{ keycap.Store }
	if _, err := conncap.New(plain{memstore.New()}); err == nil {
		t.Error("a store that cannot sync was accepted")
	}
}

// TestExactAcrossNodes: 50 concurrent admits for one user, cap 5, from 3
// nodes with clients of their own: exactly 5 are admitted.
func TestExactAcrossNodes(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() keycap.Store) {
		nodes := make([]*conncap.Cap, 3)
		for i := range nodes {
			nodes[i], _ = newNode(t, open())
		}
		var admitted, refused atomic.Int32
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				err := admit(nodes[i%3], "alice", fmt.Sprint("sock", i))
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
	})
}

// TestDeadNodeExpires: a node that stops heart-beating loses its connections
// within the TTL; one that keeps heart-beating keeps them past it.
func TestDeadNodeExpires(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() keycap.Store) {
		const beat, ttl = 100 * time.Millisecond, 400 * time.Millisecond
		alive, _ := newNode(t, open(), conncap.WithDefaultCap(2), conncap.WithHeartbeat(beat, ttl))
		dying, _ := newNode(t, open(), conncap.WithDefaultCap(2), conncap.WithHeartbeat(beat, ttl))
		other, _ := newNode(t, open(), conncap.WithDefaultCap(2), conncap.WithHeartbeat(beat, ttl))
		if err := admit(alive, "alice", "a"); err != nil {
			t.Fatal(err)
		}
		if err := admit(dying, "alice", "d"); err != nil {
			t.Fatal(err)
		}
		if err := admit(other, "alice", "o"); !errors.Is(err, conncap.ErrOverCap) {
			t.Fatalf("cap reached: %v", err)
		}
		dying.Stop() // dies: no heartbeat, no release
		start := time.Now()
		for admit(other, "alice", "o") != nil {
			if time.Since(start) > ttl+time.Second {
				t.Fatalf("the dead node's connection still counts %s later (TTL %s)", time.Since(start), ttl)
			}
			time.Sleep(20 * time.Millisecond) // expiry is time passing
		}
		if el := time.Since(start); el > ttl+200*time.Millisecond {
			t.Errorf("freed after %s, later than the TTL of %s", el, ttl)
		}
		// The live node's connection, older than several TTLs, still counts.
		if err := admit(other, "alice", "o2"); !errors.Is(err, conncap.ErrOverCap) {
			t.Fatalf("the live node's connection was lost: %v", err)
		}
	})
}

// lossy drops releases on the floor, as a release that never reached the
// store would.
type lossy struct {
	keycap.Store
	drop atomic.Bool
}

func (l *lossy) Release(ctx context.Context, p keycap.PoolID, o keycap.Owner) error {
	if l.drop.Load() {
		return nil
	}
	return l.Store.Release(ctx, p, o)
}

func (l *lossy) Sync(ctx context.Context, n keycap.NodeID, ttl time.Duration, b []keycap.SyncPool) error {
	return l.Store.(keycap.Syncer).Sync(ctx, n, ttl, b)
}

// TestGhostIsReclaimedOnTheNextHeartbeat: a release that never reached the
// store holds a slot until the node's next heartbeat, not longer; and a user
// with no connections leaves no key behind.
func TestGhostIsReclaimedOnTheNextHeartbeat(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() keycap.Store) {
		store := &lossy{Store: open()}
		c, rec := newNode(t, store, conncap.WithDefaultCap(1), conncap.WithHeartbeat(time.Hour, 2*time.Hour))
		if err := admit(c, "alice", "s1"); err != nil {
			t.Fatal(err)
		}
		store.drop.Store(true)
		c.Leave("app", "s1") // lost on the way
		store.drop.Store(false)
		if err := admit(c, "alice", "s2"); !errors.Is(err, conncap.ErrOverCap) {
			t.Fatalf("the ghost should still hold the slot before the heartbeat: %v", err)
		}
		if err := c.Heartbeat(context.Background()); err != nil {
			t.Fatal(err)
		}
		if rec.count(conncap.GhostsDropped) != 1 {
			t.Fatal("no ghost reported dropped")
		}
		if err := admit(c, "alice", "s2"); err != nil {
			t.Fatalf("after the heartbeat: %v", err)
		}
		c.Leave("app", "s2")
		if err := c.Heartbeat(context.Background()); err != nil {
			t.Fatal(err)
		}
		if rs, ok := store.Store.(*redisstore.Store); ok {
			checkNoKey(t, rs)
		}
	})
}

func checkNoKey(t *testing.T, s *redisstore.Store) {
	t.Helper()
	key := s.Key(keycap.NewPoolID("conncap:app", "alice"))
	if n, err := s.Client().Exists(context.Background(), key).Result(); err != nil || n != 0 {
		t.Fatalf("key %s left behind by a user with no connections (%d, %v)", key, n, err)
	}
}

func TestCloseWithdrawsTheNode(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() keycap.Store) {
		a, _ := newNode(t, open(), conncap.WithDefaultCap(1))
		b, _ := newNode(t, open(), conncap.WithDefaultCap(1))
		if err := admit(a, "alice", "s"); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := admit(a, "alice", "t"); !errors.Is(err, conncap.ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
		if err := admit(b, "alice", "t"); err != nil {
			t.Fatalf("the closed node's slot is not free: %v", err)
		}
	})
}

type down struct {
	keycap.Store
	fail atomic.Bool
}

var errDown = errors.New("injected outage")

func (d *down) Acquire(ctx context.Context, p keycap.PoolID, o keycap.Owner, max int, ttl time.Duration) (bool, error) {
	if d.fail.Load() {
		return false, errDown
	}
	return d.Store.Acquire(ctx, p, o, max, ttl)
}

func (d *down) Sync(ctx context.Context, n keycap.NodeID, ttl time.Duration, b []keycap.SyncPool) error {
	if d.fail.Load() {
		return errDown
	}
	return d.Store.(keycap.Syncer).Sync(ctx, n, ttl, b)
}

func TestStoreDown(t *testing.T) {
	t.Parallel()
	s := &down{Store: memstore.New()}
	closed, rec := newNode(t, s, conncap.WithDefaultCap(1))
	open, _ := newNode(t, s, conncap.WithDefaultCap(1), conncap.WithFailOpen())
	s.fail.Store(true)
	for i := range 3 {
		if err := admit(closed, "alice", fmt.Sprint("c", i)); !errors.Is(err, keycap.ErrStoreUnavailable) || !errors.Is(err, errDown) {
			t.Fatalf("fail closed: %v", err)
		}
	}
	if rec.count(conncap.StoreFailed) != 1 {
		t.Fatal("outage not reported once")
	}
	// Failing open: admitted uncounted, then counted by the first heartbeat
	// after the outage.
	if err := admit(open, "bob", "o1"); err != nil {
		t.Fatalf("fail open: %v", err)
	}
	s.fail.Store(false)
	if err := admit(closed, "bob", "x"); err != nil {
		t.Fatalf("bob's connection is not counted yet: %v", err)
	}
	closed.Leave("app", "x")
	if err := open.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := admit(closed, "bob", "y"); !errors.Is(err, conncap.ErrOverCap) {
		t.Fatalf("after the heartbeat the uncounted connection should count: %v", err)
	}
	if rec.count(conncap.StoreRecovered) != 1 {
		t.Fatal("recovery not reported")
	}
}

func TestAnyUserIDIsSafe(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() keycap.Store) {
		c, _ := newNode(t, open(), conncap.WithDefaultCap(1))
		ids := []string{"evil:admin", "evil", "u*", "{app}:x", "\x00", "", "a\r\nDEL *", "1", "01"}
		for i, id := range ids {
			if err := admit(c, id, fmt.Sprint("s", i)); err != nil {
				t.Fatalf("user %q: %v", id, err)
			}
		}
		for i, id := range ids {
			if err := admit(c, id, fmt.Sprint("t", i)); !errors.Is(err, conncap.ErrOverCap) {
				t.Fatalf("user %q shares a pool with another id: %v", id, err)
			}
		}
	})
}

// TestLiveness: a connection the server reports closed, held longer than a
// heartbeat, is dropped at the next heartbeat; a younger one is left alone.
func TestLiveness(t *testing.T) {
	t.Parallel()
	var dead sync.Map
	c, rec := newNode(t, memstore.New(), conncap.WithDefaultCap(1),
		conncap.WithHeartbeat(50*time.Millisecond, time.Minute),
		conncap.WithLiveness(func(app, user, conn string) bool { _, d := dead.Load(conn); return !d }))
	if err := admit(c, "alice", "s1"); err != nil {
		t.Fatal(err)
	}
	dead.Store("s1", true) // its close hook was missed
	deadline := time.Now().Add(5 * time.Second)
	for admit(c, "alice", "s2") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the closed connection was never dropped")
		}
		time.Sleep(10 * time.Millisecond) // heartbeats run on their own
	}
	if rec.count(conncap.Left) != 1 {
		t.Fatal("the drop was not reported as a departure")
	}
	// s2 is reported closed at once, but it is younger than a heartbeat: kept.
	dead.Store("s2", true)
	if err := c.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := admit(c, "alice", "s3"); !errors.Is(err, conncap.ErrOverCap) {
		t.Fatalf("a connection younger than a heartbeat was dropped: %v", err)
	}
}
