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

func testFences(t *testing.T, ns Namespace) {
	runGroup(t, ns, store.Fences,
		"the store gives no fencing tokens (store.Fences)", []namedTest{
			{"TokensGrowWithEveryGrant", testTokensGrow},
			{"HandedSlotIsClaimedWithAHigherToken", testTokenOfHandoff},
			{"ParentKeysTokens", testTokenOfParentKey},
			{"TokensFollowGrantOrderUnderContention", testTokenContention},
		})
}

// fenced asks s for a slot of d with a fencing token and checks whether
// it was granted: a grant carries a token above after, a refusal none.
func fenced(t *testing.T, s keycap.Store, d demand, tk *store.Ticket, want bool, after uint64) uint64 {
	t.Helper()
	d.Fence = true
	g := acquireDemand(t, s, d, tk)
	switch {
	case g.Granted != want:
		t.Fatalf("Acquire with a fence (max %d, ticket %v) granted = %v, want %v", d.Max, tk != nil, g.Granted, want)
	case !g.Granted && g.Token != 0:
		t.Fatalf("a refusal carries token %d, want none", g.Token)
	case g.Granted && g.Token <= after:
		t.Fatalf("granted with token %d, want one above %d, the pool's last", g.Token, after)
	}
	return g.Token
}

func plainDemand(p store.PoolID, o store.Owner, max int) demand {
	return demand{Pool: p, Owner: o, Demand: store.Demand{Max: max, TTL: time.Minute}}
}

// testTokensGrow: every grant of a pool carries a token above the last
// one's — a new holder, the same holder granted again — a refusal none,
// and a grant that asked for none carries none.
func testTokensGrow(t *testing.T, open func() keycap.Store) {
	s, p := open(), pool("fence")
	a, b := store.NewOwner(), store.NewOwner()
	t1 := fenced(t, s, plainDemand(p, a, 1), nil, true, 0)
	fenced(t, s, plainDemand(p, b, 1), nil, false, 0)
	t2 := fenced(t, s, plainDemand(p, a, 1), nil, true, t1) // extended, granted again
	give(t, s, plainDemand(p, a, 1), false)
	t3 := fenced(t, s, plainDemand(p, b, 1), nil, true, t2)
	give(t, s, plainDemand(p, b, 1), false)
	// Through a second client of the same store.
	fenced(t, open(), plainDemand(p, a, 1), nil, true, t3)
	if g := acquireDemand(t, s, plainDemand(pool("fence-none"), a, 1), nil); !g.Granted || g.Token != 0 {
		t.Fatalf("an acquire without Fence: granted %v, token %d; want granted, no token", g.Granted, g.Token)
	}
}

// testTokenOfHandoff: a slot handed to a ticket is claimed with a token
// above its last holder's.
func testTokenOfHandoff(t *testing.T, open func() keycap.Store) {
	s := open()
	if !s.Features().Has(store.Lines) {
		t.Skip("the store keeps no wait line (store.Lines)")
	}
	p, a, b := pool("fence-line"), store.NewOwner(), store.NewOwner()
	t1 := fenced(t, s, plainDemand(p, a, 1), &longTicket, true, 0)
	fenced(t, s, plainDemand(p, b, 1), &longTicket, false, 0)
	give(t, s, plainDemand(p, a, 1), false) // handed to b's ticket
	fenced(t, open(), plainDemand(p, b, 1), &longTicket, true, t1)
}

// testTokenOfParentKey: the keys of a parent, weighted, have tokens of
// their own pools, handed slots included.
func testTokenOfParentKey(t *testing.T, open func() keycap.Store) {
	s := open()
	if !s.Features().Has(store.Shares | store.Lines) {
		t.Skip("the store keeps no parents or lines (store.Shares, store.Lines)")
	}
	f := newFamily(fmt.Sprintf("fence:%d", time.Now().UnixNano()), 2)
	a, b, c := store.NewOwner(), store.NewOwner(), store.NewOwner()
	t1 := fenced(t, s, f.demand("x", a, 2, 2), nil, true, 0)
	fenced(t, s, f.demand("y", b, 2, 1), &longTicket, false, 0)
	give(t, s, f.demand("x", a, 2, 2), false) // a slot to y's ticket, one free
	fenced(t, s, f.demand("y", b, 2, 1), &longTicket, true, 0)
	t2 := fenced(t, open(), f.demand("x", c, 2, 1), nil, true, t1)
	give(t, s, f.demand("x", c, 2, 1), false)
	fenced(t, s, f.demand("x", a, 2, 1), nil, true, t2)
}

// testTokenContention: clients on several store clients take turns at a
// pool of one slot through Limiters; each grant's token is above every
// token granted before it, as its holder sees them in turn.
func testTokenContention(t *testing.T, open func() keycap.Store) {
	const clients, perClient = 3, 3
	lim := keycap.Spec{Name: "storetest:fence", Max: 1, Fence: true, Wait: time.Minute, TTL: 10 * time.Second}.
		For(fmt.Sprint(time.Now().UnixNano()))
	var (
		mu     sync.Mutex
		last   uint64
		grants atomic.Int64
		bad    []string
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	for range clients {
		l := newLimiter(t, open())
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					ls, err := l.Acquire(ctx, lim)
					if err != nil {
						if ctx.Err() == nil {
							errs <- err
						}
						return
					}
					f := ls.Fences()
					mu.Lock()
					switch {
					case len(f) != 1:
						bad = append(bad, fmt.Sprintf("a lease with %d fences, want 1", len(f)))
					case f[0].Token <= last:
						bad = append(bad, fmt.Sprintf("token %d granted after %d", f[0].Token, last))
					default:
						last = f[0].Token
					}
					mu.Unlock()
					grants.Add(1)
					ls.Release()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d grants out of order; first: %s", len(bad), grants.Load(), bad[0])
	}
	if grants.Load() < 10 {
		t.Fatalf("%d grants in 2s: the pool stalls", grants.Load())
	}
	t.Logf("%d grants in 2s, tokens in grant order", grants.Load())
}
