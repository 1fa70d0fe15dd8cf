package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/store"
)

// testShares runs the weight and parent tests on a store with store.Shares.
func testShares(t *testing.T, ns Namespace) {
	runGroup(t, ns, store.Shares,
		"the store keeps no weights or parents (store.Shares)", []namedTest{
			{"WeightCountsSlots", testWeightCounts},
			{"WeightedWaiterHoldsTheHead", testWeightedHead},
			{"WeightedRenewAndRelease", testWeightedRenew},
			{"ParentCapsTheTotal", testParentCaps},
			{"FreedSlotGoesToTheKeyBelowItsShare", testFairHandoff},
			{"SharesSplitTheFreedSlots", testShareSplit},
			{"MinimumIsServedFirst", testMinimum},
			{"FreshCallersDoNotOvertakeAFairerKey", testFairNoOvertaking},
			{"ServiceCountsOverTime", testFairOverTime},
			{"ReleaseSaysTheSlotTimeUsed", testHeldCharged},
			{"ManyKeysOneDecisionEach", testManyKeys},
			{"ExpiryInAnyKeyHandsOn", testKidExpiry},
			{"LapsedLeasesFreeTheirKey", testKidLapsed},
			{"ReleaseHandsOnALapsedLease", testKidLapsedAtRelease},
			{"DeadHeavyHeadUncoversTheNext", testDeadHeavyHead},
			{"NotifiesOnTheParent", testParentNotifies},
			{"KidLeaseRenewal", testKidRenew},
			{"FreedSlotIsKeptForAFairerKey", testKeep},
			{"KeptSlotPassesOnWhenNotTaken", testKeepExpires},
			{"NothingKeptWhenNoLiveKeyWaits", testKeepNoWaiter},
			{"ParentNeverOverUnderContention", testParentContention},
		})
}

// family is a parent of the tests.
type family struct {
	parent store.PoolID
	max    int
}

func newFamily(name string, max int) family {
	return family{parent: keycap.MustParent("storetest:"+name, max).Pool(), max: max}
}

// demand is a store.Demand with the pool and the owner it is made for,
// which the store's calls take beside it.
type demand struct {
	store.Demand
	Pool  store.PoolID
	Owner store.Owner
}

func (f family) demand(key string, o store.Owner, max, weight int) demand {
	return demand{Pool: pool("kid:" + key), Owner: o, Demand: store.Demand{
		Max: max, TTL: time.Minute,
		Shared: &store.Shared{Weight: weight, Parent: store.Parent{Pool: f.parent, Max: f.max, Share: 1}},
	}}
}

func weighted(name string, o store.Owner, max, weight int) demand {
	return demand{Pool: pool(name), Owner: o, Demand: store.Demand{Max: max, TTL: time.Minute, Shared: &store.Shared{Weight: weight}}}
}

// acquireDemand acquires (tk nil) or queues d and returns the grant.
func acquireDemand(t *testing.T, s keycap.Store, d demand, tk *store.Ticket) store.Grant {
	t.Helper()
	if tk != nil {
		d.Line = *tk
	}
	g, err := s.Acquire(ctx(t), d.Pool, d.Owner, d.Demand)
	if err != nil {
		t.Fatalf("Acquire(weight %d, max %d, parent max %d, ticket %v): %v", d.Weight(), d.Max, d.Shared.Parent.Max, tk != nil, err)
	}
	return g
}

// take acquires (tk nil) or queues d and checks the answer.
func take(t *testing.T, s keycap.Store, d demand, tk *store.Ticket, want bool) int {
	t.Helper()
	g := acquireDemand(t, s, d, tk)
	if g.Granted != want {
		t.Fatalf("Acquire(weight %d, max %d, parent max %d, ticket %v) granted = %v, want %v", d.Weight(), d.Max, d.Shared.Parent.Max, tk != nil, g.Granted, want)
	}
	return g.Ahead
}

func give(t *testing.T, s keycap.Store, d demand, leave bool) {
	t.Helper()
	if _, err := s.Release(ctx(t), d.Pool, d.Owner, d.Demand, leave); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// testWeightCounts: a weighted lease takes its weight of max, beside plain
// leases of the same pool, and frees it on release.
func testWeightCounts(t *testing.T, open func() keycap.Store) {
	s := open()
	heavy := weighted("weights", store.NewOwner(), 5, 3)
	take(t, s, heavy, nil, true)
	a, b := store.NewOwner(), store.NewOwner()
	mustAcquire(t, s, heavy.Pool, a, 5, time.Minute, true)
	mustAcquire(t, s, heavy.Pool, b, 5, time.Minute, true)
	mustAcquire(t, s, heavy.Pool, store.NewOwner(), 5, time.Minute, false)
	take(t, s, weighted("weights", store.NewOwner(), 5, 2), nil, false)
	take(t, s, heavy, nil, true) // held: extended
	mustRelease(t, s, heavy.Pool, a)
	take(t, s, weighted("weights", store.NewOwner(), 5, 2), nil, false) // 1 free
	give(t, s, heavy, false)
	other := weighted("weights", store.NewOwner(), 5, 4) // 4 free now
	take(t, s, other, nil, true)
	mustAcquire(t, s, heavy.Pool, store.NewOwner(), 5, time.Minute, false)
}

// testWeightedHead: a waiter of weight 2 at the head of the line is not
// overtaken by callers of weight 1, and is served once 2 slots are free.
func testWeightedHead(t *testing.T, open func() keycap.Store) {
	s := open()
	a, b := store.NewOwner(), store.NewOwner()
	p := pool("head")
	mustAcquire(t, s, p, a, 3, time.Minute, true)
	mustAcquire(t, s, p, b, 3, time.Minute, true)
	heavy := weighted("head", store.NewOwner(), 3, 2)
	take(t, s, heavy, &longTicket, false) // 1 free: not enough
	mustAcquire(t, s, p, store.NewOwner(), 3, time.Minute, false)
	mustQueue(t, s, p, store.NewOwner(), 3, longTicket, false, 1)
	mustRelease(t, s, p, a) // 2 free: handed to heavy
	take(t, s, heavy, &longTicket, true)
	mustAcquire(t, s, p, store.NewOwner(), 3, time.Minute, false)
}

// testWeightedRenew: renewing a weighted lease keeps all its slots, and
// releasing it frees them all.
func testWeightedRenew(t *testing.T, open func() keycap.Store) {
	s := open()
	// A TTL of 1 s, renewed every 300 ms: four renewals carry it past its
	// first TTL's end, each with 700 ms to spare on a loaded machine.
	d := weighted("wrenew", store.NewOwner(), 4, 4)
	d.TTL = time.Second
	take(t, s, d, nil, true)
	for range 4 {
		time.Sleep(300 * time.Millisecond)
		r := renew(t, s, store.Renewal{Pool: d.Pool, Owner: d.Owner, TTL: time.Second, Weight: 4})
		if r[0].Lost || r[0].Err != nil {
			t.Fatalf("renewal of a live weighted lease: lost %v, %v", r[0].Lost, r[0].Err)
		}
		mustAcquire(t, s, d.Pool, store.NewOwner(), 4, time.Minute, false)
	}
	give(t, s, d, false)
	for range 4 {
		mustAcquire(t, s, d.Pool, store.NewOwner(), 4, time.Minute, true)
	}
}

// testParentCaps: a grant needs room in the key's pool and in the parent;
// a key alone may borrow the parent's idle slots up to its own max.
func testParentCaps(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("caps", 4)
	for range 3 {
		take(t, s, f.demand("a", store.NewOwner(), 3, 1), nil, true) // borrows
	}
	take(t, s, f.demand("a", store.NewOwner(), 3, 1), nil, false) // its own max
	b := f.demand("b", store.NewOwner(), 3, 1)
	take(t, s, b, nil, true)
	take(t, s, f.demand("b", store.NewOwner(), 3, 1), nil, false) // the parent is full
	take(t, s, f.demand("c", store.NewOwner(), 3, 1), nil, false)
	give(t, s, b, false)
	take(t, s, f.demand("c", store.NewOwner(), 3, 1), nil, true)
	take(t, s, f.demand("c", store.NewOwner(), 3, 1), nil, false)
}

// holdN holds n slots of key in f, and returns the demands.
func holdN(t *testing.T, s keycap.Store, f family, key string, n, max int) []demand {
	t.Helper()
	var ds []demand
	for range n {
		d := f.demand(key, store.NewOwner(), max, 1)
		take(t, s, d, nil, true)
		ds = append(ds, d)
	}
	return ds
}

// testFairHandoff: with a busy key and a light one waiting, a freed slot
// goes to the light one, though the busy one waited longer.
func testFairHandoff(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("fair", 4)
	held := holdN(t, s, f, "busy", 4, 4)
	busy := []demand{f.demand("busy", store.NewOwner(), 4, 1), f.demand("busy", store.NewOwner(), 4, 1)}
	for _, d := range busy {
		take(t, s, d, &longTicket, false)
	}
	light := f.demand("light", store.NewOwner(), 4, 1)
	take(t, s, light, &longTicket, false)
	give(t, s, held[0], false)
	take(t, s, light, &longTicket, true) // holds 0 against busy's 3
	take(t, s, busy[0], &longTicket, false)
	give(t, s, held[1], false) // light 1, busy 2: busy's turn
	take(t, s, busy[0], &longTicket, true)
	take(t, s, busy[1], &longTicket, false)
}

// testShareSplit: keys of shares 2 and 1, both waiting, receive the freed
// slots two to one.
func testShareSplit(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("split", 6)
	held := holdN(t, s, f, "filler", 6, 6)
	var as, bs []demand
	for range 6 {
		a := f.demand("a", store.NewOwner(), 6, 1)
		a.Shared.Parent.Share = 2
		take(t, s, a, &longTicket, false)
		as = append(as, a)
		b := f.demand("b", store.NewOwner(), 6, 1)
		take(t, s, b, &longTicket, false)
		bs = append(bs, b)
	}
	for _, d := range held {
		give(t, s, d, false)
	}
	count := func(ds []demand) int {
		n := 0
		for _, d := range ds {
			if acquireDemand(t, s, d, &longTicket).Granted {
				n++
			}
		}
		return n
	}
	if a, b := count(as), count(bs); a != 4 || b != 2 {
		t.Fatalf("6 freed slots went %d to share 2 and %d to share 1, want 4 and 2", a, b)
	}
}

// testMinimum: a key below its minimum is served before a key that holds
// less for its share but has reached its minimum.
func testMinimum(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("min", 4)
	held := holdN(t, s, f, "filler", 2, 4)
	holdN(t, s, f, "guaranteed", 2, 4)
	other := f.demand("other", store.NewOwner(), 4, 1)
	take(t, s, other, &longTicket, false)
	gd := f.demand("guaranteed", store.NewOwner(), 4, 1)
	gd.Shared.Parent.Min = 3
	take(t, s, gd, &longTicket, false)
	give(t, s, held[0], false) // guaranteed holds 2 < 3: before other's 0
	take(t, s, gd, &longTicket, true)
	take(t, s, other, &longTicket, false)
	give(t, s, held[1], false)
	take(t, s, other, &longTicket, true)
}

// testFairNoOvertaking: a fresh caller is refused while a key that comes
// first by the share waits, even when the free slots are too few for the
// waiter's weight; it is served once the waiter is.
func testFairNoOvertaking(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("overtake", 3)
	held := holdN(t, s, f, "a", 3, 3)
	heavy := f.demand("b", store.NewOwner(), 3, 2)
	take(t, s, heavy, &longTicket, false)
	give(t, s, held[0], false)                                    // 1 free; heavy needs 2
	take(t, s, f.demand("a", store.NewOwner(), 3, 1), nil, false) // a holds 2 > b's 0
	take(t, s, f.demand("c", store.NewOwner(), 3, 1), nil, false) // a tie: the waiter first
	give(t, s, held[1], false)
	take(t, s, heavy, &longTicket, true)
	take(t, s, f.demand("c", store.NewOwner(), 3, 1), nil, false) // full
	give(t, s, held[2], false)
	take(t, s, f.demand("c", store.NewOwner(), 3, 1), nil, true)
}

// testFairOverTime: a key with many callers does not win every tie
// against a key with one. Each freed slot goes to the key that has had
// less slot-time for its share (store.Shares), though the busy key's
// waiter is older and both hold nothing when the slot frees.
func testFairOverTime(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("overtime", 1)
	busy := make([]demand, 4)
	for i := range busy {
		busy[i] = f.demand("busy", store.NewOwner(), 1, 1)
	}
	take(t, s, busy[0], nil, true)
	for _, d := range busy[1:] {
		take(t, s, d, &longTicket, false)
	}
	for i := 1; i < len(busy); i++ {
		light := f.demand("light", store.NewOwner(), 1, 1)
		take(t, s, light, &longTicket, false)
		time.Sleep(20 * time.Millisecond) // slot-time for busy: not a synchronisation
		give(t, s, busy[i-1], false)
		if !acquireDemand(t, s, light, &longTicket).Granted {
			t.Fatalf("round %d: the slot went to the key with the older waiter and more slot-time", i)
		}
		take(t, s, busy[i], &longTicket, false)
		give(t, s, light, false) // busy's turn
		take(t, s, busy[i], &longTicket, true)
	}
}

// testHeldCharged: a release's Demand.Held is the slot-time its key is
// charged, not the time the store saw the lease held: a key that held its
// slot 30 ms by the store's clock but says it used 1 ms comes before a key
// charged 10 ms, though that key's waiter is older.
func testHeldCharged(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("held", 1)
	b0 := f.demand("b", store.NewOwner(), 1, 1)
	take(t, s, b0, nil, true)
	b0.Held = 10 * time.Millisecond
	give(t, s, b0, false)
	a1 := f.demand("a", store.NewOwner(), 1, 1)
	take(t, s, a1, nil, true)
	b1 := f.demand("b", store.NewOwner(), 1, 1)
	take(t, s, b1, &longTicket, false)
	a2 := f.demand("a", store.NewOwner(), 1, 1)
	take(t, s, a2, &longTicket, false)
	time.Sleep(30 * time.Millisecond) // the store's count of a1's hold: not a synchronisation
	a1.Held = time.Millisecond
	give(t, s, a1, false)
	if !acquireDemand(t, s, a2, &longTicket).Granted {
		t.Fatal("the slot went to the key charged 10 ms, not to the key whose release said it used 1 ms")
	}
	take(t, s, b1, &longTicket, false)
}

// testManyKeys: with 2,000 keys waiting, each freed slot still goes to
// the key first in line, and the parent is never over its total.
func testManyKeys(t *testing.T, open func() keycap.Store) {
	s := open()
	const keys = 2000
	f := newFamily("many", 2)
	held := holdN(t, s, f, "holder", 2, 2)
	waiters := make([]demand, keys)
	for i := range waiters {
		waiters[i] = f.demand(fmt.Sprint("k", i), store.NewOwner(), 1, 1)
		take(t, s, waiters[i], &longTicket, false)
	}
	give(t, s, held[0], false)
	give(t, s, held[1], false)
	// The two oldest waiters, all else equal, were handed the slots.
	for i, d := range waiters[:2] {
		if !acquireDemand(t, s, d, &longTicket).Granted {
			t.Fatalf("waiter %d was not handed a slot", i)
		}
	}
	for i := 2; i < keys; i += 97 {
		take(t, s, waiters[i], &longTicket, false)
	}
	for i := range 2 {
		give(t, s, waiters[i], false)
		if !acquireDemand(t, s, waiters[2+i], &longTicket).Granted {
			t.Fatalf("waiter %d was not handed the slot freed by %d", 2+i, i)
		}
	}
}

// testKidExpiry: a lease of one key that expires is found by a call on
// another key of the parent, and handed to the waiting one.
func testKidExpiry(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("expiry", 1)
	short := f.demand("a", store.NewOwner(), 1, 1)
	short.TTL = 300 * time.Millisecond
	take(t, s, short, nil, true)
	waiter := f.demand("b", store.NewOwner(), 1, 1)
	take(t, s, waiter, &longTicket, false)
	time.Sleep(400 * time.Millisecond)
	take(t, s, f.demand("c", store.NewOwner(), 1, 1), nil, false) // finds the expiry, hands on
	if !acquireDemand(t, s, waiter, &longTicket).Granted {
		t.Fatal("the waiter was not handed the expired slot")
	}
}

// testParentNotifies: a handoff between keys is notified on the parent's
// pool, to the client watching it.
func testParentNotifies(t *testing.T, open func() keycap.Store) {
	a, b := open(), open()
	if !b.Features().Has(store.Notifications) {
		t.Skip("the store does not notify (store.Notifications)")
	}
	f := newFamily("notify", 1)
	holder := f.demand("a", store.NewOwner(), 1, 1)
	take(t, a, holder, nil, true)
	waiter := f.demand("b", store.NewOwner(), 1, 1)
	got := make(chan store.Owner, 8)
	stop, err := b.Notify(ctx(t), f.parent, func(g []store.Owner) {
		for _, o := range g {
			select {
			case got <- o:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	take(t, b, waiter, &longTicket, false)
	give(t, a, holder, false)
	select {
	case o := <-got:
		if o != waiter.Owner {
			t.Fatalf("notified %s, want the waiter %s", o, waiter.Owner)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification on the parent within 5s")
	}
}

// testKidRenew: a key's lease in a parent renews, and is reported lost
// once expired.
func testKidRenew(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("renew", 2)
	d := f.demand("a", store.NewOwner(), 2, 2)
	d.TTL = 300 * time.Millisecond
	take(t, s, d, nil, true)
	r := store.Renewal{Pool: d.Pool, Owner: d.Owner, TTL: 300 * time.Millisecond, Weight: 2, Parent: f.parent}
	if got := renew(t, s, r); got[0].Lost || got[0].Err != nil {
		t.Fatalf("renewal of a live lease: lost %v, %v", got[0].Lost, got[0].Err)
	}
	take(t, s, f.demand("b", store.NewOwner(), 2, 1), nil, false)
	time.Sleep(400 * time.Millisecond)
	if got := renew(t, s, r); !got[0].Lost {
		t.Fatal("renewal of an expired lease was not reported lost")
	}
	take(t, s, f.demand("b", store.NewOwner(), 2, 2), nil, true)
}

// testParentContention: Limiters on three clients, four keys of a parent
// with weights 1 and 2, waiting in the lines: the parent and each key never
// hold more than their max.
func testParentContention(t *testing.T, open func() keycap.Store) {
	const parentMax, kidMax, clients, perKey = 6, 4, 3, 4
	parent := keycap.MustParent(fmt.Sprintf("storetest:contention:%d", time.Now().UnixNano()), parentMax)
	keys := []string{"k0", "k1", "k2", "k3"}
	var total atomic.Int64
	var inKey [4]atomic.Int64
	var over, overKey, grants atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for c := range clients {
		l := newLimiter(t, open())
		for ki, key := range keys {
			weight := 1 + ki%2
			lim := keycap.Spec{Name: "storetest:contention", Max: kidMax, Parent: parent, Weight: weight, Wait: time.Minute, FailMode: keycap.FailClosed, TTL: 10 * time.Second}.For(key)
			for range perKey {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						ls, err := l.Acquire(ctx, lim)
						if err != nil {
							if ctx.Err() == nil {
								e := fmt.Errorf("client %d key %s: %w", c, key, err)
								firstErr.CompareAndSwap(nil, &e)
							}
							return
						}
						grants.Add(1)
						if n := total.Add(int64(weight)); n > parentMax {
							over.Add(1)
						}
						if n := inKey[ki].Add(int64(weight)); n > kidMax {
							overKey.Add(1)
						}
						time.Sleep(time.Millisecond)
						inKey[ki].Add(-int64(weight))
						total.Add(-int64(weight))
						ls.Release()
					}
				}()
			}
		}
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		t.Fatal(*err)
	}
	if over.Load() > 0 || overKey.Load() > 0 {
		t.Errorf("over the parent's max %d times, over a key's max %d times", over.Load(), overKey.Load())
	}
	// A stalled line grants nothing more; a slow one still grants. pgstore
	// under -race grants 49–89 in the 3 s on a quiet 2-core machine (its
	// parent decisions are slow: issue 27), so the floor catches a stall,
	// not that slowness.
	if grants.Load() < 20 {
		t.Errorf("%d grants in 3s: the line stalls", grants.Load())
	}
	t.Logf("%d grants in 3s, %d clients, %d keys", grants.Load(), clients, len(keys))
}

// release frees d and returns whether the store kept the slot for d's key.
func release(t *testing.T, s keycap.Store, d demand) bool {
	t.Helper()
	kept, err := s.Release(ctx(t), d.Pool, d.Owner, d.Demand, false)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	return kept
}

// testKeep: a slot freed by a key that would be served first is kept for
// its next caller, not handed to a busier waiting key; a slot freed by the
// busier key goes to the line.
func testKeep(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("keep", 3)
	light := f.demand("light", store.NewOwner(), 3, 1)
	light.Shared.Parent.Keep = time.Minute
	take(t, s, light, nil, true)
	busy := holdN(t, s, f, "busy", 2, 3)
	waiter := f.demand("busy", store.NewOwner(), 3, 1)
	take(t, s, waiter, &longTicket, false)
	if !release(t, s, light) { // light holds 0 against busy's 2
		t.Fatal("the light key's freed slot was not kept for it")
	}
	take(t, s, waiter, &longTicket, false) // not handed to busy
	take(t, s, f.demand("other", store.NewOwner(), 3, 1), nil, false)
	next := f.demand("light", store.NewOwner(), 3, 1)
	next.Shared.Parent.Keep = time.Minute
	take(t, s, next, nil, true) // the light key's next caller takes it
	busy[0].Shared.Parent.Keep = time.Minute
	if release(t, s, busy[0]) { // busy has a waiter of its own: the slot goes to its line
		t.Fatal("a slot was kept for a key that would not be served first")
	}
	take(t, s, waiter, &longTicket, true)
}

// testKeepExpires: a kept slot that its key does not take back passes to
// the line at the first call on the parent after the keep.
func testKeepExpires(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("keep-expires", 2)
	light := f.demand("light", store.NewOwner(), 2, 1)
	light.Shared.Parent.Keep = 2 * time.Second // long enough for the next call to find it, on a loaded machine
	take(t, s, light, nil, true)
	holdN(t, s, f, "busy", 1, 2)
	waiter := f.demand("busy", store.NewOwner(), 2, 1)
	take(t, s, waiter, &longTicket, false)
	if !release(t, s, light) {
		t.Fatal("the light key's freed slot was not kept for it")
	}
	take(t, s, waiter, &longTicket, false)
	time.Sleep(2100 * time.Millisecond)
	release(t, s, f.demand("busy", store.NewOwner(), 2, 1)) // releases nothing: the Limiter's call after a keep
	take(t, s, waiter, &longTicket, true)
}

// testKeepNoWaiter: a slot is kept only from a key that waits: when the
// other key's only ticket has expired, the freed slot stays free for any
// caller. (internal/safety's checker found memstore keeping it, seed
// 253511448802 of TestHistoriesMemstore: the parent's queue still named
// the key whose ticket had expired, and a freed slot sat idle for the
// keep's time.)
func testKeepNoWaiter(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("keep-no-waiter", 2)
	light := f.demand("light", store.NewOwner(), 2, 1)
	light.Shared.Parent.Keep = time.Minute
	take(t, s, light, nil, true)
	holdN(t, s, f, "busy", 1, 2)
	ticket := store.Ticket{TTL: 200 * time.Millisecond, Claim: time.Minute}
	queued := time.Now()
	take(t, s, f.demand("busy", store.NewOwner(), 2, 1), &ticket, false)  // the parent is full
	time.Sleep(time.Until(queued.Add(ticket.TTL + 200*time.Millisecond))) // the ticket expires
	if release(t, s, light) {
		t.Fatal("a slot was kept while no key waited")
	}
	take(t, s, f.demand("other", store.NewOwner(), 2, 1), nil, true)
}

// testKidLapsed: when every lease of a parent lapses unreleased (its holders
// crashed) while a ticket waits, the key's slots are free again: its waiter
// and its fresh callers are served.
func testKidLapsed(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("lapsed", 4)
	gone := f.demand("a", store.NewOwner(), 1, 1)
	gone.TTL = 300 * time.Millisecond
	take(t, s, gone, nil, true)
	waiter := f.demand("a", store.NewOwner(), 1, 1)
	take(t, s, waiter, &longTicket, false) // a's own max
	time.Sleep(500 * time.Millisecond)
	take(t, s, waiter, &longTicket, true)
	give(t, s, waiter, false)
	take(t, s, f.demand("a", store.NewOwner(), 1, 1), nil, true)
}

// testKidLapsedAtRelease: a release of one key finds the lapsed lease of
// another, whose waiter its own max held back, and hands the slot to that
// waiter at once — not at the next acquire, by when the waiter's ticket
// may have expired. (internal/safety's checker found memstore serving the
// line at a release only when a key's head was already in the queue:
// here the slot stayed free, the ticket expired, and a fresh caller took
// the slots.)
func testKidLapsedAtRelease(t *testing.T, open func() keycap.Store) {
	s := open()
	f := newFamily("lapsed-release", 2)
	gone := f.demand("a", store.NewOwner(), 1, 1)
	gone.TTL = 200 * time.Millisecond
	take(t, s, gone, nil, true)
	other := f.demand("b", store.NewOwner(), 1, 1)
	take(t, s, other, nil, true)
	waiter := f.demand("a", store.NewOwner(), 1, 1)
	ticket := store.Ticket{TTL: time.Second, Claim: time.Minute}
	queued := time.Now()
	take(t, s, waiter, &ticket, false) // a's own max, and the parent's
	time.Sleep(400 * time.Millisecond) // gone's lease lapses
	give(t, s, other, false)           // finds it: the waiter is handed a's slot
	time.Sleep(time.Until(queued.Add(ticket.TTL + 200*time.Millisecond)))
	// The ticket has expired; the handed slot is still the waiter's, so
	// a fresh caller of two slots finds one.
	take(t, s, f.demand("c", store.NewOwner(), 2, 2), nil, false)
	if !acquireDemand(t, s, waiter, nil).Granted {
		t.Fatal("the slot handed to the waiter is not its")
	}
}

// testDeadHeavyHead: a key whose head ticket does not fit the key's own
// max is out of the parent's queue, waiting for its own slots; when that
// waiter dies (its ticket expires), the lighter waiter behind it, which
// fits, is served at its next call, not when one of the key's leases ends
// — for a lease its holder renews, never. (internal/safety's checker
// found every store leaving such a key out until a call changed its
// leases.)
func testDeadHeavyHead(t *testing.T, open func() keycap.Store) {
	s := open()
	short := store.Ticket{TTL: 500 * time.Millisecond, Claim: time.Minute}
	for try := 0; ; try++ {
		f := newFamily(fmt.Sprintf("dead-head-%d", try), 4)
		a := fmt.Sprintf("a%d", try)
		take(t, s, f.demand(a, store.NewOwner(), 2, 1), nil, true) // a holds 1 of its 2
		queued := time.Now()
		take(t, s, f.demand(a, store.NewOwner(), 2, 2), &short, false) // 1 + 2 > 2: waits for a's own slots
		light := f.demand(a, store.NewOwner(), 2, 1)
		g := acquireDemand(t, s, light, &longTicket)
		if el := time.Since(queued); el >= short.TTL*9/10 {
			// Too slow a machine: the heavy ticket may have expired
			// before the light one queued behind it. Again, on new keys.
			if try == 2 {
				t.Fatalf("three tries took %s or more to queue two tickets: the heavy one's TTL of %s passed", el, short.TTL)
			}
			continue
		}
		if g.Granted || g.Ahead != 1 {
			t.Fatalf("the light waiter: granted %v with %d ahead, want refused behind the heavy one", g.Granted, g.Ahead)
		}
		// heavy's caller is gone: from its ticket's expiry on, light's
		// next call finds the parent's free slots.
		waitFor(t, 5*time.Second, func() bool { return acquireDemand(t, s, light, &longTicket).Granted })
		// (A store's clock may count in whole milliseconds: a tenth of
		// the TTL allows for it.)
		if el := time.Since(queued); el < short.TTL*9/10 {
			t.Fatalf("the light waiter was served %s after the heavy one queued, before its ticket's TTL of %s", el, short.TTL)
		}
		take(t, s, f.demand(a, store.NewOwner(), 2, 1), nil, false)  // a's own max
		take(t, s, f.demand("b", store.NewOwner(), 2, 2), nil, true) // the parent's last 2
		return
	}
}
