package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/store"
)

// testLines runs the wait-line tests on a store with store.Lines.
func testLines(t *testing.T, ns Namespace) {
	runGroup(t, ns, store.Lines,
		"the store keeps no wait line (store.Lines)", []namedTest{
			{"ArrivalOrder", testArrivalOrder},
			{"FreshCallersDoNotOvertake", testNoOvertaking},
			{"AbandonedTicketExpires", testAbandonedTicket},
			{"UnclaimedHandoffPassesOn", testUnclaimedHandoff},
			{"DequeuePassesTheSlotOn", testDequeue},
			{"LargerMaxServesSeveral", testLargerMax},
			{"ExpiryFoundByAnyCallHandsOn", testExpiryHandsOn},
			{"NotifiesTheWaiter", testNotifies},
			{"WaitersAcrossClientsInOrder", testOrderAcrossClients},
			{"NeverOverMaxUnderContention", testLineContention},
		})
}

var longTicket = store.Ticket{TTL: time.Minute, Claim: time.Minute}

// queue asks s for a plain slot of p for o, with a ticket tk in p's line
// when refused, and returns the grant.
func queue(t *testing.T, s keycap.Store, p store.PoolID, o store.Owner, max int, tk store.Ticket) store.Grant {
	t.Helper()
	g, err := s.Acquire(ctx(t), p, o, store.Demand{Max: max, TTL: time.Minute, Line: tk})
	if err != nil {
		t.Fatalf("Acquire with a ticket: %v", err)
	}
	return g
}

// mustQueue queues o and checks whether it was granted, and when not, its
// place (ahead < 0: any).
func mustQueue(t *testing.T, s keycap.Store, p store.PoolID, o store.Owner, max int, tk store.Ticket, want bool, wantAhead int) {
	t.Helper()
	g := queue(t, s, p, o, max, tk)
	if g.Granted != want {
		t.Fatalf("Acquire with a ticket (max %d) granted = %v, want %v", max, g.Granted, want)
	}
	if !g.Granted && wantAhead >= 0 && g.Ahead != wantAhead {
		t.Fatalf("Acquire with a ticket: %d tickets ahead, want %d", g.Ahead, wantAhead)
	}
}

// mustLeave takes o out of p's line (Release with leave), freeing a slot
// handed to it.
func mustLeave(t *testing.T, s keycap.Store, p store.PoolID, o store.Owner) {
	t.Helper()
	if _, err := s.Release(ctx(t), p, o, store.Demand{}, true); err != nil {
		t.Fatalf("Release, leaving the line: %v", err)
	}
}

func owners(n int) []store.Owner {
	o := make([]store.Owner, n)
	for i := range o {
		o[i] = store.NewOwner()
	}
	return o
}

// testArrivalOrder: each freed slot goes to the oldest ticket.
func testArrivalOrder(t *testing.T, open func() keycap.Store) {
	s := open()
	p, holder, w := pool("order"), store.NewOwner(), owners(3)
	mustAcquire(t, s, p, holder, 1, time.Minute, true)
	for i, o := range w {
		mustQueue(t, s, p, o, 1, longTicket, false, i)
	}
	mustQueue(t, s, p, w[1], 1, longTicket, false, 1) // queueing again keeps the place
	prev := holder
	for i, o := range w {
		mustRelease(t, s, p, prev)
		for _, later := range w[i+1:] {
			mustQueue(t, s, p, later, 1, longTicket, false, -1)
		}
		mustQueue(t, s, p, o, 1, longTicket, true, 0)
		prev = o
	}
	mustRelease(t, s, p, prev)
	mustAcquire(t, s, p, store.NewOwner(), 1, time.Minute, true) // the line is empty
}

// testNoOvertaking: while a ticket waits, an Acquire without one is refused,
// even when the slot it would take is free.
func testNoOvertaking(t *testing.T, open func() keycap.Store) {
	s := open()
	p, holder, w := pool("overtake"), store.NewOwner(), store.NewOwner()
	mustAcquire(t, s, p, holder, 2, time.Minute, true)
	mustAcquire(t, s, p, store.NewOwner(), 2, time.Minute, true)
	mustQueue(t, s, p, w, 2, longTicket, false, 0)
	mustRelease(t, s, p, holder) // the freed slot is w's, unclaimed yet
	mustAcquire(t, s, p, store.NewOwner(), 2, time.Minute, false)
	mustQueue(t, s, p, store.NewOwner(), 2, longTicket, false, 0)
	mustQueue(t, s, p, w, 2, longTicket, true, 0)
	mustAcquire(t, s, p, store.NewOwner(), 2, time.Minute, false)
}

// testAbandonedTicket: a ticket whose owner stops queueing expires and does
// not hold the line.
func testAbandonedTicket(t *testing.T, open func() keycap.Store) {
	s := open()
	p, holder := pool("abandoned"), store.NewOwner()
	mustAcquire(t, s, p, holder, 1, time.Minute, true)
	const ttl = 300 * time.Millisecond
	start := time.Now()
	mustQueue(t, s, p, store.NewOwner(), 1, store.Ticket{TTL: ttl, Claim: ttl}, false, 0)
	mustAcquire(t, s, p, store.NewOwner(), 1, time.Minute, false)
	waitFor(t, 2*ttl+3*time.Second, func() bool {
		// Released while the ticket lives, the slot is handed to it (for
		// its claim window); after, the expired ticket is dropped.
		mustRelease(t, s, p, holder)
		return acquire(t, s, p, store.NewOwner(), 1, time.Minute)
	})
	if el := time.Since(start); el < ttl/2 {
		t.Fatalf("the ticket expired after %s, before half its TTL of %s", el, ttl)
	}
}

// testUnclaimedHandoff: a slot handed to a ticket that is not claimed in
// its claim window passes to the next ticket.
func testUnclaimedHandoff(t *testing.T, open func() keycap.Store) {
	s := open()
	p, holder, a, b := pool("unclaimed"), store.NewOwner(), store.NewOwner(), store.NewOwner()
	mustAcquire(t, s, p, holder, 1, time.Minute, true)
	const claim = 300 * time.Millisecond
	start := time.Now()
	mustQueue(t, s, p, a, 1, store.Ticket{TTL: time.Minute, Claim: claim}, false, 0)
	mustQueue(t, s, p, b, 1, longTicket, false, 1)
	mustRelease(t, s, p, holder) // a's now, for claim
	waitFor(t, claim+3*time.Second, func() bool { return queue(t, s, p, b, 1, longTicket).Granted })
	if el := time.Since(start); el < claim/2 {
		t.Fatalf("the handoff passed on after %s, before half its claim window of %s", el, claim)
	}
	mustQueue(t, s, p, a, 1, longTicket, false, 0) // too late: a waits again, at the back
}

// testDequeue: a waiter that gives up leaves the line, and a slot already
// handed to it goes to the next ticket at once.
func testDequeue(t *testing.T, open func() keycap.Store) {
	s := open()
	p, holder, w := pool("dequeue"), store.NewOwner(), owners(3)
	mustAcquire(t, s, p, holder, 1, time.Minute, true)
	for i, o := range w {
		mustQueue(t, s, p, o, 1, longTicket, false, i)
	}
	mustLeave(t, s, p, w[1])
	mustQueue(t, s, p, w[2], 1, longTicket, false, 1)
	mustRelease(t, s, p, holder) // w[0]'s
	mustLeave(t, s, p, w[0])
	mustQueue(t, s, p, w[2], 1, longTicket, true, 0)
	mustLeave(t, s, p, store.NewOwner()) // unknown: nothing
	mustAcquire(t, s, p, store.NewOwner(), 1, time.Minute, false)
}

// testLargerMax: raising max hands the new slots to the line, in order.
func testLargerMax(t *testing.T, open func() keycap.Store) {
	s := open()
	p, holder, w := pool("larger"), store.NewOwner(), owners(3)
	mustAcquire(t, s, p, holder, 1, time.Minute, true)
	mustQueue(t, s, p, w[0], 1, longTicket, false, 0)
	mustQueue(t, s, p, w[1], 1, longTicket, false, 1)
	mustQueue(t, s, p, w[2], 3, longTicket, false, 0) // max 3: w[0] and w[1] are served first
	mustQueue(t, s, p, w[0], 3, longTicket, true, 0)
	mustQueue(t, s, p, w[1], 3, longTicket, true, 0)
	mustAcquire(t, s, p, store.NewOwner(), 3, time.Minute, false)
	if n := held(t, s, p, 3); n != 3 {
		t.Fatalf("pool holds %d leases, want 3", n)
	}
}

// testExpiryHandsOn: a lease that expires is handed to the line by the next
// call that finds it, whichever it is.
func testExpiryHandsOn(t *testing.T, open func() keycap.Store) {
	s := open()
	p, w := pool("expiry-line"), store.NewOwner()
	const ttl = 300 * time.Millisecond
	mustAcquire(t, s, p, store.NewOwner(), 1, ttl, true)
	mustQueue(t, s, p, w, 1, longTicket, false, 0)
	waitFor(t, ttl+3*time.Second, func() bool { return queue(t, s, p, w, 1, longTicket).Granted })
}

// testNotifies: a waiter on one client hears of its handoff when the slot
// frees on another, and so does a waiter on the same client.
func testNotifies(t *testing.T, open func() keycap.Store) {
	s1, s2 := open(), open()
	if !s2.Features().Has(store.Notifications) {
		t.Skip("the store does not notify (store.Notifications): waiters poll")
	}
	p, holder, w := pool("notify"), store.NewOwner(), store.NewOwner()
	heard := make(chan []store.Owner, 16)
	stop, err := s2.Notify(ctx(t), p, func(g []store.Owner) {
		select {
		case heard <- slices.Clone(g):
		default:
		}
	})
	if err != nil {
		t.Fatalf("Notify: %v", err)
	}
	defer stop()
	mustAcquire(t, s1, p, holder, 1, time.Minute, true)
	mustQueue(t, s2, p, w, 1, longTicket, false, 0)
	start := time.Now()
	mustRelease(t, s1, p, holder)
	select {
	case g := <-heard:
		if !slices.Contains(g, w) {
			t.Fatalf("notified of %v, want the waiter %v", g, w)
		}
		t.Logf("notified %s after the release", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("no notification within 5s of the release")
	}
	mustQueue(t, s2, p, w, 1, longTicket, true, 0)
	stop()
	stop() // idempotent
}

// testOrderAcrossClients: tickets taken through several clients are served
// in the order they were taken.
func testOrderAcrossClients(t *testing.T, open func() keycap.Store) {
	clients := []keycap.Store{open(), open(), open()}
	p, holder, w := pool("across"), store.NewOwner(), owners(9)
	mustAcquire(t, clients[0], p, holder, 1, time.Minute, true)
	for i, o := range w {
		mustQueue(t, clients[i%len(clients)], p, o, 1, longTicket, false, i)
	}
	prev, prevClient := holder, clients[0]
	for i, o := range w {
		mustRelease(t, prevClient, p, prev)
		c := clients[(i+1)%len(clients)] // claimed through another client than its own
		for _, later := range w[i+1:] {
			mustQueue(t, c, p, later, 1, longTicket, false, -1)
		}
		mustQueue(t, c, p, o, 1, longTicket, true, 0)
		prev, prevClient = o, c
	}
}

// testLineContention: waiters on several clients queue, take, hold and
// release slots for a while; the pool never holds more than max, every
// waiter is served, and the line serves them in turn.
func testLineContention(t *testing.T, open func() keycap.Store) {
	const (
		clients   = 3
		perClient = 4
		max       = 2
	)
	p := pool("line-contention")
	var inside, peak, over atomic.Int32
	var served [clients * perClient]atomic.Int32
	var firstErr atomic.Pointer[error]
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for ci := range clients {
		s := open()
		for g := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := ci*perClient + g
				for c.Err() == nil {
					o := store.NewOwner()
					for c.Err() == nil {
						g, err := s.Acquire(c, p, o, store.Demand{Max: max, TTL: time.Minute, Line: store.Ticket{TTL: 5 * time.Second, Claim: 5 * time.Second}})
						if err != nil {
							if c.Err() == nil {
								fail(fmt.Errorf("queue: %w", err))
							}
							return
						}
						if g.Granted {
							break
						}
						time.Sleep(time.Duration(rand.N(2000)) * time.Microsecond)
					}
					if c.Err() != nil {
						_, _ = s.Release(context.Background(), p, o, store.Demand{}, true)
						return
					}
					n := inside.Add(1)
					for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
					}
					if n > max {
						over.Add(1)
					}
					served[id].Add(1)
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					if _, err := s.Release(context.Background(), p, o, store.Demand{}, false); err != nil {
						fail(fmt.Errorf("release: %w", err))
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		t.Fatal(*err)
	}
	if n := over.Load(); n > 0 {
		t.Errorf("%d times the pool had more than %d holders inside", n, max)
	}
	if got := peak.Load(); got != max {
		t.Errorf("peak holders %d, want exactly %d", got, max)
	}
	total := 0
	for i := range served {
		n := int(served[i].Load())
		total += n
		if n == 0 {
			t.Errorf("waiter %d was never served", i)
		}
	}
	t.Logf("%d waiters on %d clients, 3s: %d grants", clients*perClient, clients, total)
}
