package conncap_test

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
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

// newNode starts a node on store: a Limiter of its own (its own node name
// and heartbeat) with a Cap, closed when the test ends.
func newNode(t *testing.T, s keycap.Store, heartbeat time.Duration, opts ...conncap.Option) (*conncap.Cap, *keycaptest.Recorder) {
	t.Helper()
	rec := &keycaptest.Recorder{}
	lopts := []keycap.Option{keycap.WithObserver(rec), keycap.WithRecoverAfter(time.Millisecond)}
	if heartbeat > 0 {
		lopts = append(lopts, keycap.WithHeartbeat(heartbeat))
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
	return c, rec
}

func admit(c *conncap.Cap, user, conn string) error {
	return c.Admit(context.Background(), "app", user, conn)
}

// The behaviour across nodes and on every store — exact under concurrency,
// dead nodes expiring, ghosts reclaimed, Close withdrawing, any user id — is
// checked by storetest on each store that keeps members (store.Members).

func TestCap(t *testing.T) {
	t.Parallel()
	c, rec := newNode(t, memstore.New(), 0, conncap.WithDefaultCap(2), conncap.WithAppCap("open", 0))
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
	if rec.Count(keycap.LimitExceeded, "app") != 1 || rec.Count(keycap.SlotReleased, "app") != 1 {
		t.Fatalf("events: %+v", rec.Events())
	}
	if e := rec.Events()[0]; e.Family != keycap.FamilyConn || e.Limit.Key() != "alice" {
		t.Fatalf("an admission reported as %+v", e)
	}
}

func TestOptionsNameTheField(t *testing.T) {
	t.Parallel()
	l, err := keycap.NewLimiter(memstore.New(), keycap.WithHeartbeat(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for field, opt := range map[string]conncap.Option{
		"default cap":    conncap.WithDefaultCap(-1),
		`cap of app "x"`: conncap.WithAppCap("x", -2),
		"TTL":            conncap.WithSpec(keycap.Spec{TTL: time.Minute}),
		"FailMode":       conncap.WithSpec(keycap.Spec{FailMode: keycap.FailMode(9)}),
		"Name":           conncap.WithSpec(keycap.Spec{Name: "chat"}),
		"Max":            conncap.WithSpec(keycap.Spec{Max: 3}),
		"Family":         conncap.WithSpec(keycap.Spec{Family: keycap.FamilyJob}),
		"Wait":           conncap.WithSpec(keycap.Spec{Wait: time.Second}),
	} {
		_, err := conncap.New(l, opt)
		var ie *keycap.InvalidLimitError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
	// A connection takes one slot, with no parent: each of these fields
	// is refused by New, not by every Admit.
	for name, sp := range map[string]keycap.Spec{
		"weight":  {Weight: 2},
		"parent":  {Parent: keycap.MustParent("conns", 10)},
		"share":   {Share: 2},
		"minimum": {Minimum: 1},
	} {
		_, err := conncap.New(l, conncap.WithSpec(sp))
		var ie *keycap.InvalidLimitError
		if !errors.As(err, &ie) || ie.Field != "Weight" {
			t.Errorf("%s: got %v, want an *InvalidLimitError of Weight", name, err)
		}
	}
	pl, _ := keycap.NewLimiter(plain{memstore.New()})
	defer pl.Close()
	if _, err := conncap.New(pl); !errors.Is(err, keycap.ErrNotSupported) {
		t.Errorf("a store that cannot sync: %v, want ErrNotSupported", err)
	}
}

// plain declares no feature of the store it wraps.
type plain struct{ store.Store }

func (plain) Features() store.Features { return 0 }

// down is a store of members (only) that can fail.
type down struct {
	store.Store
	fail atomic.Bool
}

var errDown = errors.New("injected outage")

func (d *down) Features() store.Features { return store.Members }

func (d *down) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, dm store.Demand) (store.Grant, error) {
	if d.fail.Load() {
		return store.Grant{}, errDown
	}
	return d.Store.Acquire(ctx, pool, owner, dm)
}

func (d *down) Sync(ctx context.Context, n store.NodeID, ttl time.Duration, b []store.SyncPool) error {
	if d.fail.Load() {
		return errDown
	}
	return d.Store.Sync(ctx, n, ttl, b)
}

func TestStoreDown(t *testing.T) {
	t.Parallel()
	s := &down{Store: memstore.New()}
	closed, rec := newNode(t, s, 0, conncap.WithDefaultCap(1))
	open, _ := newNode(t, s, 0, conncap.WithDefaultCap(1), conncap.WithSpec(keycap.Spec{FailMode: keycap.FailOpen}))
	s.fail.Store(true)
	for i := range 3 {
		if err := admit(closed, "alice", fmt.Sprint("c", i)); !errors.Is(err, keycap.ErrStoreUnavailable) || !errors.Is(err, errDown) {
			t.Fatalf("fail closed: %v", err)
		}
	}
	if rec.Count(keycap.StoreFailed, "") != 1 {
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
	// Recovered once the store has answered for the recover-after time.
	deadline := time.Now().Add(5 * time.Second)
	for rec.Count(keycap.StoreRecovered, "") == 0 && time.Now().Before(deadline) {
		_ = admit(closed, "carol", "z")
		closed.Leave("app", "z")
	}
	if rec.Count(keycap.StoreRecovered, "") != 1 {
		t.Fatal("recovery not reported")
	}
}

// TestLiveness: a connection the server reports closed, held longer than a
// heartbeat, is dropped at the next heartbeat; a younger one is left alone.
func TestLiveness(t *testing.T) {
	t.Parallel()
	var dead sync.Map
	c, rec := newNode(t, memstore.New(), 50*time.Millisecond, conncap.WithDefaultCap(1),
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
	if rec.Count(keycap.SlotReleased, "app") != 1 {
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

// TestOtherFrontDoorsCannotReachConnectionPools: an application or HTTP
// limit named like conncap's pools once were ("conncap:<app>") counts in a
// family of its own: it can neither fill a user's connection pool nor be
// filled by it.
func TestOtherFrontDoorsCannotReachConnectionPools(t *testing.T) {
	t.Parallel()
	l, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	caps, err := conncap.New(l, conncap.WithDefaultCap(1))
	if err != nil {
		t.Fatal(err)
	}
	defer caps.Close()
	ls, err := l.Acquire(context.Background(), keycap.Spec{Name: "conncap:chat", Max: 1}.For("alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release()
	if err := caps.Admit(context.Background(), "chat", "alice", "s1"); err != nil {
		t.Fatalf("an HTTP limit named conncap:chat filled alice's connection pool: %v", err)
	}
	if _, err := l.Acquire(context.Background(), keycap.Spec{Name: "chat", Max: 1}.For("alice")); err != nil {
		t.Fatalf("alice's connection filled an application pool: %v", err)
	}
}
