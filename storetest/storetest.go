// Package storetest is the conformance suite of store.Store (keycap.Store):
// every store (memstore, nullstore, redisstore on a single Redis and on
// Redis Cluster, pgstore) runs it from its own tests, and a store written
// elsewhere can run it too:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) func() keycap.Store {
//			ns := newNamespace(t) // fresh, empty, cleaned up when t ends
//			return func() keycap.Store { return openClient(t, ns) }
//		})
//	}
//
// The suite checks the contract through the Store interface, through a
// keycap.Limiter on top of it, under load from several clients at once, and
// through the front doors that need more than the three methods (connection
// caps across nodes on a store with store.Members). Each test of a feature
// runs on a store that declares it (Store.Features) and is skipped, saying
// why, on one that does not; a store must then answer the feature's methods
// with an error matching store.ErrNotSupported, which the suite checks too.
package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/store"
)

// Namespace returns a function that opens clients of one fresh, empty
// namespace of the store under test. Every store it opens must share the
// namespace's state (as several processes sharing one Redis do), each through
// its own connections where the store has any. Resources are freed with
// t.Cleanup.
type Namespace func(t *testing.T) (open func() keycap.Store)

// An Option tunes the suite.
type Option struct{ apply func(*config) }

type config struct {
	contention   time.Duration
	grantsAll    bool
	grantsAllWhy string
}

// WithContentionTime sets how long the "never over max" test runs (default
// 3 s), for slow stores.
func WithContentionTime(d time.Duration) Option { return Option{func(c *config) { c.contention = d }} }

// GrantsEverything says that the store turns limits off (nullstore): it
// grants every slot and keeps nothing. The suite then checks what such a
// store must still do — answer every call without an error, grant every
// acquire and renewal, pause and pace nothing, let a Limiter on it work with
// balanced events — and skips, saying why, the tests of what it does not do
// (refusing past max, expiry, marks' ages, pauses).
func GrantsEverything(why string) Option {
	return Option{func(c *config) { c.grantsAll, c.grantsAllWhy = true, why }}
}

// Run runs the conformance suite.
func Run(t *testing.T, ns Namespace, opts ...Option) {
	c := config{contention: 3 * time.Second}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, open func() keycap.Store)
		caps bool // needs a store that keeps leases and refuses past max
	}{
		{"GrantsUpToMaxThenRefuses", testGrantsUpToMax, true},
		{"SameOwnerIsGrantedOnce", testSameOwner, true},
		{"ExpiryFreesSlot", testExpiry, true},
		{"StaleReleaseDoesNothing", testStaleRelease, true},
		{"ReleaseIsIdempotent", testReleaseIdempotent, true},
		{"RenewExtends", testRenewExtends, true},
		{"RenewAfterExpiryReportsLost", testRenewLost, true},
		{"RenewBatchMixed", testRenewBatch, true},
		{"LoweringAndRaisingMax", testChangeMax, true},
		{"ThousandPools", testManyPools, true},
		{"BinaryAndHugeKeys", testKeys, true},
		{"LimiterKeepsLeaseAlive", testKeepAlive, true},
		{"Marks", testMarks, true},
		{"Pauses", testPauses, true},
		{"Pacing", testPacing, true},
		{"NodeSync", testSync, true},
		{"NeverOverMaxUnderContention", func(t *testing.T, open func() keycap.Store) {
			testContention(t, open, c.contention)
		}, true},
		{"GrantsEverything", testGrantsEverything, false},
	}
	for _, tc := range tests {
		if !tc.caps && !c.grantsAll {
			continue // only for stores that turn limits off
		}
		t.Run(tc.name, func(t *testing.T) {
			if tc.caps && c.grantsAll {
				t.Skipf("does not apply: the store grants everything (%s)", c.grantsAllWhy)
			}
			tc.fn(t, ns(t))
		})
	}
	t.Run("Features", func(t *testing.T) { testFeatures(t, ns(t)) })
	if !c.grantsAll {
		t.Run("ConnCaps", func(t *testing.T) { testConnCaps(t, ns) })
		t.Run("Lines", func(t *testing.T) { testLines(t, ns) })
		t.Run("Shares", func(t *testing.T) { testShares(t, ns) })
		t.Run("Inspect", func(t *testing.T) { testInspect(t, ns) })
		t.Run("Overrides", func(t *testing.T) { testOverrides(t, ns) })
		t.Run("Fences", func(t *testing.T) { testFences(t, ns) })
		t.Run("Totals", func(t *testing.T) { testTotals(t, ns) })
	}
}

// namedTest is one test of a group.
type namedTest struct {
	name string
	fn   func(t *testing.T, open func() keycap.Store)
}

// runGroup runs each test on a fresh namespace of its own, skipped, saying
// why, when the store does not declare the features the group checks
// (need).
func runGroup(t *testing.T, ns Namespace, need store.Features, why string, tests []namedTest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			open := ns(t)
			if !open().Features().Has(need) {
				t.Skip(why)
			}
			tc.fn(t, open)
		})
	}
}

// testGrantsEverything checks a store that turns limits off: every call
// answers, every acquire past any max and every renewal is granted, nothing
// is paused or paced, and a Limiter on it grants and reports balanced
// events.
func testGrantsEverything(t *testing.T, open func() keycap.Store) {
	s := open()
	p := pool("all")
	owners := make([]store.Owner, 50)
	for i := range owners {
		owners[i] = store.NewOwner()
		mustAcquire(t, s, p, owners[i], 1, time.Minute, true)
	}
	batch := make([]store.Renewal, len(owners))
	for i, o := range owners {
		batch[i] = store.Renewal{Pool: p, Owner: o, TTL: time.Minute}
	}
	for _, r := range renew(t, s, batch...) {
		if r.Lost {
			t.Fatal("Renew reported a lease lost")
		}
	}
	for _, o := range owners {
		mustRelease(t, s, p, o)
		mustRelease(t, s, p, o)
	}
	has := s.Features()
	if has.Has(store.Pauses) {
		if _, err := s.Pause(ctx(t), p, time.Hour); err != nil {
			t.Fatal(err)
		}
		if left, err := s.Paused(ctx(t), p); err != nil || left != 0 {
			t.Fatalf("Paused = %v, %v: a store that turns limits off pauses nothing", left, err)
		}
	}
	if has.Has(store.Paces) {
		for range 100 {
			if wait, err := s.Pace(ctx(t), p, store.Rate{Events: 1, Period: time.Hour, Burst: 1}); err != nil || wait != 0 {
				t.Fatalf("Pace = %v, %v: a store that turns limits off paces nothing", wait, err)
			}
		}
	}
	if has.Has(store.Marks) {
		if _, _, err := s.Mark(ctx(t), p, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if has.Has(store.Members) {
		if err := s.Sync(ctx(t), store.NodeOf("n"), time.Minute, []store.SyncPool{{Pool: p, Members: owners[:2]}}); err != nil {
			t.Fatal(err)
		}
	}
	var acquired, released atomic.Int64
	l, err := keycap.NewLimiter(s, keycap.WithObserver(keycap.ObserverFunc(func(e keycap.Event) {
		switch e.Kind {
		case keycap.SlotAcquired:
			acquired.Add(1)
		case keycap.SlotReleased:
			released.Add(1)
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lim := keycap.Spec{Name: "all", Max: 1}.For("k")
	var leases []*keycap.Lease
	for range 10 {
		ls, err := l.Acquire(ctx(t), lim)
		if err != nil {
			t.Fatalf("Acquire past max: %v", err)
		}
		leases = append(leases, ls)
	}
	for _, ls := range leases {
		ls.Release()
	}
	if a, r := acquired.Load(), released.Load(); a != 10 || r != 10 {
		t.Fatalf("events: %d acquired, %d released; want 10 and 10", a, r)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// appPool returns the pool (name, key) of keycap.FamilyApp: the pool of
// keycap.Spec{Name: name}.For(key).
func appPool(name, key string) store.PoolID { return store.PoolOf(byte(keycap.FamilyApp), name, key) }

func pool(name string) store.PoolID { return appPool("storetest", name) }

// acquire asks s for a plain slot of p for o and returns whether it was
// granted.
func acquire(t *testing.T, s keycap.Store, p store.PoolID, o store.Owner, max int, ttl time.Duration) bool {
	t.Helper()
	g, err := s.Acquire(ctx(t), p, o, store.Demand{Max: max, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return g.Granted
}

func mustAcquire(t *testing.T, s keycap.Store, p store.PoolID, o store.Owner, max int, ttl time.Duration, want bool) {
	t.Helper()
	if got := acquire(t, s, p, o, max, ttl); got != want {
		t.Fatalf("Acquire(max %d) = %v, want %v", max, got, want)
	}
}

func mustRelease(t *testing.T, s keycap.Store, p store.PoolID, o store.Owner) {
	t.Helper()
	if _, err := s.Release(ctx(t), p, o, store.Demand{}, false); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// held counts the leases of p by filling it: it acquires with fresh owners
// until refused (max is large), then releases them. It returns how many
// leases the pool held before.
func held(t *testing.T, s keycap.Store, p store.PoolID, capacity int) int {
	t.Helper()
	var probes []store.Owner
	for {
		o := store.NewOwner()
		if !acquire(t, s, p, o, capacity, time.Minute) {
			break
		}
		probes = append(probes, o)
		if len(probes) > capacity {
			t.Fatalf("pool granted more than %d leases", capacity)
		}
	}
	for _, o := range probes {
		mustRelease(t, s, p, o)
	}
	return capacity - len(probes)
}

func testGrantsUpToMax(t *testing.T, open func() keycap.Store) {
	s := open()
	for _, max := range []int{1, 3, 7} {
		p := pool(fmt.Sprint("max", max))
		owners := make([]store.Owner, max)
		for i := range owners {
			owners[i] = store.NewOwner()
			mustAcquire(t, s, p, owners[i], max, time.Minute, true)
		}
		mustAcquire(t, s, p, store.NewOwner(), max, time.Minute, false)
		mustRelease(t, s, p, owners[0])
		mustAcquire(t, s, p, store.NewOwner(), max, time.Minute, true)
		mustAcquire(t, s, p, store.NewOwner(), max, time.Minute, false)
	}
}

func testSameOwner(t *testing.T, open func() keycap.Store) {
	s := open()
	p, o := pool("same"), store.NewOwner()
	mustAcquire(t, s, p, o, 2, time.Minute, true)
	mustAcquire(t, s, p, o, 2, time.Minute, true) // a retried call: not a second lease
	if n := held(t, s, p, 10); n != 1 {
		t.Fatalf("pool holds %d leases after the same owner acquired twice, want 1", n)
	}
}

// waitFor polls cond until it holds or timeout passes. Expiry has no signal
// to wait on: time passing is what is tested.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("condition not met within %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func testExpiry(t *testing.T, open func() keycap.Store) {
	s := open()
	p := pool("expiry")
	const ttl = 300 * time.Millisecond
	start := time.Now()
	mustAcquire(t, s, p, store.NewOwner(), 1, ttl, true)
	mustAcquire(t, s, p, store.NewOwner(), 1, ttl, false)
	waitFor(t, ttl+2*time.Second, func() bool { return acquire(t, s, p, store.NewOwner(), 1, time.Minute) })
	// A store whose clock runs ahead of ours may free it a little early, but
	// not before half the TTL.
	if el := time.Since(start); el < ttl/2 {
		t.Fatalf("slot freed after %s, before its TTL of %s", el, ttl)
	}
}

func testStaleRelease(t *testing.T, open func() keycap.Store) {
	s := open()
	p := pool("stale")
	a, b := store.NewOwner(), store.NewOwner()
	mustAcquire(t, s, p, a, 1, 100*time.Millisecond, true)
	waitFor(t, 3*time.Second, func() bool { return acquire(t, s, p, b, 1, time.Minute) })
	mustRelease(t, s, p, a) // late: a's lease expired and b holds the slot
	mustAcquire(t, s, p, store.NewOwner(), 1, time.Minute, false)
}

func testReleaseIdempotent(t *testing.T, open func() keycap.Store) {
	s := open()
	p, o := pool("idem"), store.NewOwner()
	mustRelease(t, s, p, o) // never granted
	mustAcquire(t, s, p, o, 1, time.Minute, true)
	mustRelease(t, s, p, o)
	mustRelease(t, s, p, o)
	mustAcquire(t, s, p, store.NewOwner(), 1, time.Minute, true)
	mustAcquire(t, s, p, store.NewOwner(), 1, time.Minute, false)
}

func renew(t *testing.T, s keycap.Store, batch ...store.Renewal) []store.Renewal {
	t.Helper()
	if err := s.Renew(ctx(t), batch); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	for i, r := range batch {
		if r.Err != nil {
			t.Fatalf("Renew: lease %d: %v", i, r.Err)
		}
	}
	return batch
}

func testRenewExtends(t *testing.T, open func() keycap.Store) {
	s := open()
	p, o := pool("renew"), store.NewOwner()
	const ttl = 400 * time.Millisecond
	mustAcquire(t, s, p, o, 1, ttl, true)
	r := renew(t, s, store.Renewal{Pool: p, Owner: o, TTL: time.Minute})
	if r[0].Lost {
		t.Fatal("Renew reported a live lease lost")
	}
	// Past the original TTL the slot is still held.
	time.Sleep(ttl + 200*time.Millisecond)
	mustAcquire(t, s, p, store.NewOwner(), 1, time.Minute, false)
}

func testRenewLost(t *testing.T, open func() keycap.Store) {
	s := open()
	p, o, probe := pool("lost"), store.NewOwner(), store.NewOwner()
	mustAcquire(t, s, p, o, 1, 100*time.Millisecond, true)
	// Once another owner gets the only slot, o's lease has expired.
	waitFor(t, 3*time.Second, func() bool { return acquire(t, s, p, probe, 1, time.Minute) })
	mustRelease(t, s, p, probe)
	r := renew(t, s, store.Renewal{Pool: p, Owner: o, TTL: time.Minute})
	if !r[0].Lost {
		t.Fatal("Renew after expiry did not report the lease lost")
	}
	// A lost lease is not resurrected.
	if n := held(t, s, p, 10); n != 0 {
		t.Fatalf("pool holds %d leases after renewing a lost one, want 0", n)
	}
}

func testRenewBatch(t *testing.T, open func() keycap.Store) {
	s := open()
	var batch []store.Renewal
	for i := range 5 {
		p, o := pool(fmt.Sprint("batch", i)), store.NewOwner()
		mustAcquire(t, s, p, o, 1, time.Minute, true)
		batch = append(batch, store.Renewal{Pool: p, Owner: o, TTL: time.Minute})
	}
	batch = append(batch,
		store.Renewal{Pool: pool("batch0"), Owner: store.NewOwner(), TTL: time.Minute}, // unknown owner
		store.Renewal{Pool: pool("batch-none"), Owner: store.NewOwner(), TTL: time.Minute},
	)
	mustRelease(t, s, batch[2].Pool, batch[2].Owner)
	r := renew(t, s, batch...)
	for i, want := range []bool{false, false, true, false, false, true, true} {
		if r[i].Lost != want {
			t.Errorf("lease %d: Lost = %v, want %v", i, r[i].Lost, want)
		}
	}
}

func testChangeMax(t *testing.T, open func() keycap.Store) {
	s := open()
	p := pool("change")
	owners := []store.Owner{store.NewOwner(), store.NewOwner(), store.NewOwner()}
	for _, o := range owners {
		mustAcquire(t, s, p, o, 3, time.Minute, true)
	}
	// Lowered to 2 while 3 are held: nobody gets in until fewer than 2 are.
	mustAcquire(t, s, p, store.NewOwner(), 2, time.Minute, false)
	mustRelease(t, s, p, owners[0])
	mustAcquire(t, s, p, store.NewOwner(), 2, time.Minute, false)
	mustRelease(t, s, p, owners[1])
	mustAcquire(t, s, p, store.NewOwner(), 2, time.Minute, true)
	mustAcquire(t, s, p, store.NewOwner(), 2, time.Minute, false)
	// Raised to 5: three more fit beside the two held.
	for range 3 {
		mustAcquire(t, s, p, store.NewOwner(), 5, time.Minute, true)
	}
	mustAcquire(t, s, p, store.NewOwner(), 5, time.Minute, false)
}

func testManyPools(t *testing.T, open func() keycap.Store) {
	s := open()
	owners := make([]store.Owner, 1000)
	for i := range owners {
		owners[i] = store.NewOwner()
		mustAcquire(t, s, pool(fmt.Sprint("many", i)), owners[i], 1, time.Minute, true)
	}
	for i := range owners {
		mustAcquire(t, s, pool(fmt.Sprint("many", i)), store.NewOwner(), 1, time.Minute, false)
	}
	for i := range owners {
		mustRelease(t, s, pool(fmt.Sprint("many", i)), owners[i])
	}
	for i := range owners {
		mustAcquire(t, s, pool(fmt.Sprint("many", i)), store.NewOwner(), 1, time.Minute, true)
	}
}

// newLimiter returns a Limiter on s that fails closed, with a generous
// decision budget: the suite checks what a store decides, not how fast; a
// machine loaded by parallel tests must not turn a slow answer into a
// failure.
func newLimiter(t *testing.T, s keycap.Store) *keycap.Limiter {
	l, err := keycap.NewLimiter(s, keycap.WithDefaultFailMode(keycap.FailClosed), keycap.WithDecisionBudget(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func testKeys(t *testing.T, open func() keycap.Store) {
	l := newLimiter(t, open())
	huge := make([]byte, 1<<20)
	_, _ = rand.Read(huge)
	huge2 := append([]byte(nil), huge...)
	huge2[len(huge2)-1] ^= 1
	keys := []string{"", "\x00", "\x00\x00", "\xff\xfe{}\r\n*1\r\n", "user:1", "user:1 ", string(huge), string(huge2)}
	var leases []*keycap.Lease
	for _, k := range keys {
		lim := keycap.Spec{Name: "keys", Max: 1}.For(k)
		ls, err := l.Acquire(ctx(t), lim)
		if err != nil {
			t.Fatalf("key of %d bytes: first Acquire: %v", len(k), err)
		}
		leases = append(leases, ls)
	}
	for _, k := range keys {
		_, err := l.Acquire(ctx(t), keycap.Spec{Name: "keys", Max: 1}.For(k))
		if !errors.Is(err, keycap.ErrLimitExceeded) {
			t.Fatalf("key of %d bytes: second Acquire: %v, want ErrLimitExceeded", len(k), err)
		}
	}
	// The same key under another name is another pool.
	ls, err := l.Acquire(ctx(t), keycap.Spec{Name: "other", Max: 1}.For("user:1"))
	if err != nil {
		t.Fatalf("same key, other name: %v", err)
	}
	ls.Release()
	for _, ls := range leases {
		ls.Release()
	}
	for _, k := range keys {
		ls, err := l.Acquire(ctx(t), keycap.Spec{Name: "keys", Max: 1}.For(k))
		if err != nil {
			t.Fatalf("key of %d bytes: Acquire after Release: %v", len(k), err)
		}
		ls.Release()
	}
}

func testKeepAlive(t *testing.T, open func() keycap.Store) {
	l := newLimiter(t, open())
	lim := keycap.Spec{Name: "keepalive", Max: 1, TTL: 300 * time.Millisecond}.For("k")
	ls, err := l.Acquire(ctx(t), lim)
	if err != nil {
		t.Fatal(err)
	}
	// Held for four TTLs: the Limiter's renewals keep it.
	deadline := time.Now().Add(4 * lim.Spec().TTL)
	for time.Now().Before(deadline) {
		if _, err := l.Acquire(ctx(t), lim); !errors.Is(err, keycap.ErrLimitExceeded) {
			t.Fatalf("while held: Acquire = %v, want ErrLimitExceeded", err)
		}
		select {
		case <-ls.Lost():
			t.Fatal("lease lost while its holder was alive")
		case <-time.After(50 * time.Millisecond):
		}
	}
	ls.Release()
	ls2, err := l.Acquire(ctx(t), lim)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	ls2.Release()
}

// testMarks checks store.Marks, for the stores that declare it: a mark
// starts once, across clients, ages by the store's clock, and is forgotten
// after its TTL.
func testMarks(t *testing.T, open func() keycap.Store) {
	a := open()
	if !a.Features().Has(store.Marks) {
		t.Skip("the store does not keep marks (store.Marks)")
	}
	b := open()
	mark := func(m keycap.Store, id string, ttl time.Duration) (time.Duration, bool) {
		t.Helper()
		age, started, err := m.Mark(ctx(t), appPool("storetest-mark", id), ttl)
		if err != nil {
			t.Fatalf("Mark: %v", err)
		}
		if started && age != 0 {
			t.Fatalf("the mark was started %s ago by this very call", age)
		}
		return age, started
	}
	if _, started := mark(a, "x", time.Minute); !started {
		t.Fatal("a new mark was not started")
	}
	start := time.Now()
	time.Sleep(150 * time.Millisecond)        // marks age with time: nothing to wait on but time
	age, started := mark(b, "x", time.Minute) // another client sees the same mark
	if el := time.Since(start); started || age < 100*time.Millisecond || age > el+time.Second {
		t.Fatalf("mark is %s old after %s", age, el)
	}
	if _, started := mark(a, "y", time.Minute); !started {
		t.Fatal("another mark was not started")
	}
	// Expiry: a mark is forgotten after its TTL, and starts again.
	mark(a, "short", 100*time.Millisecond)
	waitFor(t, 3*time.Second, func() bool { _, started := mark(a, "short", 100*time.Millisecond); return started })

	// Many clients marking at once: exactly one starts the mark.
	var starters atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		m := open()
		for range 8 {
			wg.Go(func() {
				_, ok, err := m.Mark(context.Background(), appPool("storetest-mark", "race"), time.Minute)
				if err != nil {
					t.Error(err)
				} else if ok {
					starters.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if n := starters.Load(); n != 1 {
		t.Fatalf("%d concurrent Marks started the mark, want 1", n)
	}
}

// testPauses checks store.Pauses: a pause is shared by every client, only
// ever extends (atomically, under concurrent pausers), and ends by itself.
func testPauses(t *testing.T, open func() keycap.Store) {
	a := open()
	if !a.Features().Has(store.Pauses) {
		t.Skip("the store keeps no pauses (store.Pauses)")
	}
	b := open()
	id := appPool("storetest-pause", "api")
	paused := func(p keycap.Store) time.Duration {
		t.Helper()
		d, err := p.Paused(ctx(t), id)
		if err != nil {
			t.Fatalf("Paused: %v", err)
		}
		return d
	}
	pause := func(p keycap.Store, d time.Duration) time.Duration {
		t.Helper()
		left, err := p.Pause(ctx(t), id, d)
		if err != nil {
			t.Fatalf("Pause: %v", err)
		}
		return left
	}
	if d := paused(a); d != 0 {
		t.Fatalf("paused %s before any pause", d)
	}
	if left := pause(a, 10*time.Second); left < 9*time.Second || left > 10*time.Second {
		t.Fatalf("Pause(10s) = %s", left)
	}
	// Another client sees it; a shorter pause does not shorten it.
	if left := pause(b, time.Second); left < 9*time.Second {
		t.Fatalf("a shorter pause shortened a longer one: %s left", left)
	}
	if d := paused(b); d < 9*time.Second || d > 10*time.Second {
		t.Fatalf("other client sees %s", d)
	}
	// A longer pause extends it.
	if left := pause(b, 20*time.Second); left < 19*time.Second {
		t.Fatalf("a longer pause did not extend: %s", left)
	}
	// A pause ends by itself.
	short := appPool("storetest-pause", "short")
	if _, err := a.Pause(ctx(t), short, 150*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, func() bool {
		d, err := b.Paused(ctx(t), short)
		if err != nil {
			t.Fatal(err)
		}
		return d == 0
	})
	// Concurrent pausers: the longest wins, whatever the order.
	race := appPool("storetest-pause", "race")
	var wg sync.WaitGroup
	for i := range 32 {
		p := open()
		wg.Go(func() {
			if _, err := p.Pause(context.Background(), race, time.Duration(i+1)*time.Second); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if d, err := a.Paused(ctx(t), race); err != nil || d < 31*time.Second {
		t.Fatalf("after concurrent pauses of 1..32 s: %s left, %v; want about 32 s", d, err)
	}
}

// testPacing checks store.Paces: a burst goes at once, then events are
// spaced by the rate, across every client.
func testPacing(t *testing.T, open func() keycap.Store) {
	a := open()
	if !a.Features().Has(store.Paces) {
		t.Skip("the store keeps no paces (store.Paces)")
	}
	b := open()
	id := appPool("storetest-pace", "api")
	rate := store.Rate{Events: 10, Period: time.Second, Burst: 3}
	pace := func(p keycap.Store) time.Duration {
		t.Helper()
		d, err := p.Pace(ctx(t), id, rate)
		if err != nil {
			t.Fatalf("Pace: %v", err)
		}
		return d
	}
	for i := range 3 {
		if d := pace([]keycap.Store{a, b}[i%2]); d != 0 {
			t.Fatalf("event %d of the burst must go now, got wait %s", i+1, d)
		}
	}
	d := pace(b)
	if d <= 0 || d > 150*time.Millisecond {
		t.Fatalf("after the burst: wait %s, want about 100ms", d)
	}
	time.Sleep(d) // the wait the pacer asked for
	waitFor(t, time.Second, func() bool { return pace(a) == 0 })
	if _, err := a.Pace(ctx(t), id, store.Rate{}); err == nil {
		t.Fatal("an invalid rate was accepted")
	}

	// Under load from several clients: over one second, at most the burst
	// plus the rate's events.
	load := appPool("storetest-pace", "load")
	// last: the latest call's start, since start; decided: the latest
	// return of a call that was allowed. Every allowed event was decided
	// before its call returned, so the rate bounds the events by decided;
	// on a loaded machine a call can return long after it started, so the
	// floor is taken up to the last call made instead.
	var allowed, last, decided atomic.Int64
	stop := time.Now().Add(time.Second)
	start := time.Now()
	latest := func(v *atomic.Int64, at int64) {
		for {
			old := v.Load()
			if at <= old || v.CompareAndSwap(old, at) {
				return
			}
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		p := open()
		for range 4 {
			wg.Go(func() {
				for now := time.Now(); now.Before(stop); now = time.Now() {
					latest(&last, int64(now.Sub(start)))
					d, err := p.Pace(context.Background(), load, rate)
					if err != nil {
						t.Error(err)
						return
					}
					if d == 0 {
						latest(&decided, int64(time.Since(start)))
						allowed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	interval := rate.Period / time.Duration(rate.Events)
	events := func(elapsed time.Duration) int64 {
		return int64(rate.Burst) + int64(elapsed/interval) + 1
	}
	// Never more than the rate allows; and, lest the store refuse
	// everything, at least half of it (fewer only on a machine so loaded
	// that the 16 callers together call less than the rate).
	most, least := events(time.Duration(decided.Load())), events(time.Duration(last.Load()))/2
	if n := allowed.Load(); n > most || n < least {
		t.Fatalf("%d events allowed, the last decided by %s, want at most %d and at least %d (burst %d + %d/s)",
			n, time.Duration(decided.Load()), most, least, rate.Burst, rate.Events)
	}
}

// testSync checks store.Members: a node's members become exactly its live
// ones — renewed, restored, ghosts dropped — and other nodes' are untouched.
func testSync(t *testing.T, open func() keycap.Store) {
	s := open()
	if !s.Features().Has(store.Members) {
		t.Skip("the store keeps no members (store.Members)")
	}
	nodeA, nodeB := store.NodeOf("a"), store.NodeOf("b")
	a1, a2, a3 := store.MemberOf(nodeA, "1"), store.MemberOf(nodeA, "2"), store.MemberOf(nodeA, "3")
	b1 := store.MemberOf(nodeB, "1")
	if a1 == b1 || store.MemberOf(nodeA, "1") != a1 {
		t.Fatal("node owners must differ by node and be stable")
	}
	p, q := pool("sync-p"), pool("sync-q")
	const short = 300 * time.Millisecond
	// long outlives the test, however slow the machine (a busy one took
	// two minutes over it, under -race).
	const long = time.Hour
	mustAcquire(t, s, p, a1, 3, short, true)
	mustAcquire(t, s, p, a2, 3, short, true) // a2 will be a ghost: released where the store never saw it
	mustAcquire(t, s, p, b1, 3, long, true)
	mustAcquire(t, s, q, a3, 1, long, true)

	batch := []store.SyncPool{{Pool: p, Members: []store.Owner{a1}}, {Pool: q}}
	if err := s.Sync(ctx(t), nodeA, long, batch); err != nil {
		t.Fatal(err)
	}
	for i, sp := range batch {
		if sp.Err != nil {
			t.Fatalf("pool %d: %v", i, sp.Err)
		}
	}
	if batch[0].Removed != 1 || batch[1].Removed != 1 {
		t.Fatalf("removed %d and %d ghosts, want 1 and 1", batch[0].Removed, batch[1].Removed)
	}
	// a1 renewed past its acquire TTL; a2 gone; b1 untouched; q empty.
	time.Sleep(short + 100*time.Millisecond) // a1's first TTL runs out: only the sync keeps it
	if n := held(t, s, p, 10); n != 2 {
		t.Fatalf("pool holds %d members after the sync, want 2 (a1 renewed, b1)", n)
	}
	if n := held(t, s, q, 10); n != 0 {
		t.Fatalf("emptied pool holds %d members", n)
	}
	// A live member the store lost is restored, even beyond max.
	mustAcquire(t, s, q, store.NewOwner(), 1, long, true)
	batch = []store.SyncPool{{Pool: q, Members: []store.Owner{a3}}}
	if err := s.Sync(ctx(t), nodeA, long, batch); err != nil || batch[0].Err != nil {
		t.Fatal(err, batch[0].Err)
	}
	if n := held(t, s, q, 10); n != 2 {
		t.Fatalf("pool holds %d after restoring a lost member, want 2", n)
	}
	// A ghost among the node's own live members, with no other node's
	// beside them, is dropped too.
	r := pool("sync-r")
	a4, a5 := store.MemberOf(nodeA, "4"), store.MemberOf(nodeA, "5")
	mustAcquire(t, s, r, a4, 3, long, true)
	mustAcquire(t, s, r, a5, 3, long, true)
	batch = []store.SyncPool{{Pool: r, Members: []store.Owner{a4}}}
	if err := s.Sync(ctx(t), nodeA, long, batch); err != nil || batch[0].Err != nil {
		t.Fatal(err, batch[0].Err)
	}
	if batch[0].Removed != 1 {
		t.Fatalf("removed %d ghosts among the node's own members, want 1", batch[0].Removed)
	}
	if n := held(t, s, r, 10); n != 1 {
		t.Fatalf("pool holds %d after dropping the ghost, want 1", n)
	}
	// Thousands of members of one pool, restored, then half of them ghosts.
	big := pool("sync-big")
	many := make([]store.Owner, 5000)
	for i := range many {
		many[i] = store.MemberOf(nodeA, fmt.Sprint("m", i))
	}
	batch = []store.SyncPool{{Pool: big, Members: many}}
	if err := s.Sync(ctx(t), nodeA, long, batch); err != nil || batch[0].Err != nil {
		t.Fatal(err, batch[0].Err)
	}
	if n := held(t, s, big, len(many)+1); n != len(many) {
		t.Fatalf("pool holds %d after restoring %d members", n, len(many))
	}
	batch = []store.SyncPool{{Pool: big, Members: many[:len(many)/2]}}
	if err := s.Sync(ctx(t), nodeA, long, batch); err != nil || batch[0].Err != nil {
		t.Fatal(err, batch[0].Err)
	}
	if batch[0].Removed != len(many)/2 {
		t.Fatalf("removed %d of %d ghosts", batch[0].Removed, len(many)/2)
	}
	if n := held(t, s, big, len(many)+1); n != len(many)/2 {
		t.Fatalf("pool holds %d, want %d", n, len(many)/2)
	}
	// A node that syncs nothing loses everything it had there: a1, a3 and
	// the big pool's members.
	batch = []store.SyncPool{{Pool: p}, {Pool: q}, {Pool: big}}
	if err := s.Sync(ctx(t), nodeA, long, batch); err != nil {
		t.Fatal(err)
	}
	if batch[0].Removed != 1 || batch[1].Removed != 1 || batch[2].Removed != len(many)/2 {
		t.Fatalf("removed %d, %d and %d, want 1, 1 and %d", batch[0].Removed, batch[1].Removed, batch[2].Removed, len(many)/2)
	}
	if n := held(t, s, p, 10); n != 1 {
		t.Fatalf("pool holds %d, want node b's one member", n)
	}
}

// testContention runs several clients, each with several goroutines, that
// take and release slots of a few pools as fast as they can, and counts the
// holders of each pool inside the critical section.
func testContention(t *testing.T, open func() keycap.Store, d time.Duration) {
	const (
		clients   = 4
		perClient = 8
		pools     = 3
		max       = 3
	)
	var inside, peak [pools]atomic.Int32
	var grants, refusals, over atomic.Int64
	var firstErr atomic.Pointer[error]
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for c := range clients {
		l := newLimiter(t, open())
		for g := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				limits := make([]keycap.Limit, pools)
				for i := range limits {
					limits[i] = keycap.Spec{Name: "contention", Max: max, TTL: time.Minute}.For(fmt.Sprint(i))
				}
				for i := c*perClient + g; time.Now().Before(stop); i++ {
					p := i % pools
					ls, err := l.Acquire(context.Background(), limits[p])
					if errors.Is(err, keycap.ErrLimitExceeded) {
						refusals.Add(1)
						continue
					}
					if err != nil {
						fail(err)
						return
					}
					n := inside[p].Add(1)
					for {
						old := peak[p].Load()
						if n <= old || peak[p].CompareAndSwap(old, n) {
							break
						}
					}
					if n > max {
						over.Add(1)
					}
					grants.Add(1)
					// Hold the slot while others run, as real work would.
					runtime.Gosched()
					inside[p].Add(-1)
					ls.Release()
				}
			}()
		}
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		t.Errorf("Acquire failed: %v", *err)
	}
	if n := over.Load(); n > 0 {
		t.Errorf("%d times a pool had more than %d holders inside", n, max)
	}
	for p := range pools {
		// The test must have pushed each pool to its cap, or it proved nothing.
		if got := peak[p].Load(); got != max {
			t.Errorf("pool %d: peak holders %d, want exactly %d", p, got, max)
		}
	}
	if refusals.Load() == 0 {
		t.Error("no Acquire was refused: the pools were never contended")
	}
	t.Logf("%d clients × %d goroutines, %s: %d grants, %d refusals", clients, perClient, d, grants.Load(), refusals.Load())
}
