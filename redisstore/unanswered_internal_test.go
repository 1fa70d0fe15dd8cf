package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/store"
)

// TestUnsentCallIsNoOutage: calls that wait in their lane for a sender that
// is not run — the lane taken, as by a sender the scheduler has not got to
// — never reach Redis, and say so (an UnansweredError of no time at
// Redis): a decision whose budget runs out there is the process's
// overload, not an outage, and so is a release sent without waiting that
// its budget finds still queued. Once the lane's sender runs, the calls
// whose time is up are dropped unsent, and the lane serves again.
func TestUnsentCallIsNoOutage(t *testing.T) {
	c := testenv.Redis(t)
	s, err := New(c, WithPrefix(testenv.Prefix(t, c)))
	if err != nil {
		t.Fatal(err)
	}
	rec := &keycaptest.Recorder{}
	const budget = 50 * time.Millisecond
	l, err := keycap.NewLimiter(s, keycap.WithObserver(rec), keycap.WithDecisionBudget(budget))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lim := keycap.Spec{Name: "unsent", Max: 1, FailMode: keycap.FailClosed}.For("k")
	ctx := context.Background()
	// The library loaded, a connection open, with time to spare on a busy
	// machine.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	owner := store.NewOwner()
	if _, err := s.Acquire(wctx, lim.Pool(), owner, store.Demand{Max: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(wctx, lim.Pool(), owner, store.Demand{Max: 1, TTL: time.Minute}, false); err != nil {
		t.Fatal(err)
	}
	cancel()
	q := lane(s.queues.single, lim.Pool())
	q.mu.Lock()
	q.running = true // a sender that does not run
	q.mu.Unlock()

	// The store's account.
	sctx, cancel := context.WithTimeout(ctx, budget)
	_, err = s.Acquire(sctx, lim.Pool(), store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute})
	cancel()
	var u *store.UnansweredError
	if !errors.As(err, &u) || !errors.Is(err, context.DeadlineExceeded) || u.Outstanding != 0 {
		t.Fatalf("an acquire that never left its lane: %v, want an UnansweredError of no time at Redis", err)
	}
	released := make(chan error, 1)
	s.ReleaseAsync(lim.Pool(), store.NewOwner(), store.Demand{}, budget, func(err error) { released <- err })

	// The Limiter's verdict.
	_, err = l.Acquire(ctx, lim)
	var be *keycap.BudgetError
	if !errors.Is(err, keycap.ErrStoreUnavailable) || !errors.As(err, &be) || !be.Overloaded || be.StoreTime != 0 {
		t.Fatalf("a decision that never left its lane: %v, want a *StoreError wrapping an overloaded *BudgetError", err)
	}
	// (The acquire's slot is released in the background, in the same lane:
	// that too can be the process's overload.)
	if f, o := rec.Count(keycap.StoreFailed, ""), rec.Count(keycap.ProcessOverloaded, "unsent"); f != 0 || o < 1 {
		t.Fatalf("%d StoreFailed and %d ProcessOverloaded, want none and the decision's", f, o)
	}

	go q.run() // the sender, at last
	err = testkit.Recv(t, released, 10*time.Second, "the queued release's outcome")
	if !errors.As(err, &u) || u.Outstanding != 0 {
		t.Fatalf("a release whose budget passed in its lane: %v, want an UnansweredError of no time at Redis", err)
	}
	testkit.WaitUntil(t, 10*time.Second, "the lane idle", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return !q.running
	})
	if n := rec.Count(keycap.StoreFailed, ""); n != 0 {
		t.Fatalf("%d StoreFailed, want none", n)
	}
	wctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if g, err := s.Acquire(wctx, lim.Pool(), store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute}); err != nil || !g.Granted {
		t.Fatalf("once the sender ran: %v, %v; want the slot, free", g.Granted, err)
	}
}
