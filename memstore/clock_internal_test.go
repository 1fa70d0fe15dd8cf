package memstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap/store"
)

// TestExpiriesOutliveALaggingClock keeps the shape of the bug that
// internal/safety's checker found (seeds 705232443730, 732222220959 and
// 14978980762, which replay the clients' choices but not the timing that
// made it): memstore set expiries by its coarse clock, which lagged by
// milliseconds in a process starved of CPU, so a lease — there, a slot
// handed to a ticket, claimed within 60 ms — ended early by the lag. Here
// the coarse clock (judge) lags 5 ms when the lease and the handed slot are
// timed, and not at all when another owner asks for them.
func TestExpiriesOutliveALaggingClock(t *testing.T) {
	var now, lag atomic.Int64
	now.Store(int64(time.Hour))
	s := New()
	s.clock = func() time.Duration { return time.Duration(now.Load()) }
	s.judge = func() time.Duration { return time.Duration(now.Load() - lag.Load()) }
	ctx := context.Background()
	acquire := func(p store.PoolID, o store.Owner, d store.Demand) bool {
		t.Helper()
		g, err := s.Acquire(ctx, p, o, d)
		if err != nil {
			t.Fatal(err)
		}
		return g.Granted
	}
	const ttl, claim = 60 * time.Millisecond, 60 * time.Millisecond
	plain := store.Demand{Max: 1, TTL: ttl}
	waiting := store.Demand{Max: 1, TTL: time.Second, Line: store.Ticket{TTL: time.Second, Claim: claim}}

	// A lease, and a slot handed to a ticket, timed while the coarse clock
	// lags.
	lease, handed := store.PoolOf(store.Internal, "lag", "lease"), store.PoolOf(store.Internal, "lag", "handed")
	lag.Store(int64(5 * time.Millisecond))
	if !acquire(lease, store.NewOwner(), plain) {
		t.Fatal("the lease was refused")
	}
	holder, waiter := store.NewOwner(), store.NewOwner()
	if !acquire(handed, holder, plain) || acquire(handed, waiter, waiting) {
		t.Fatal("the holder refused, or the waiter granted at once")
	}
	if _, err := s.Release(ctx, handed, holder, plain, false); err != nil {
		t.Fatal(err)
	}

	// A millisecond before either can have ended, with the clocks agreeing
	// again, another owner is refused; at its end, granted.
	lag.Store(0)
	now.Add(int64(ttl - time.Millisecond))
	if acquire(lease, store.NewOwner(), plain) {
		t.Fatal("a lease ended before its TTL: timed by the lagging clock")
	}
	if acquire(handed, store.NewOwner(), plain) {
		t.Fatal("a handed slot went to another owner before its claim window closed: timed by the lagging clock")
	}
	now.Add(int64(time.Millisecond))
	if !acquire(lease, store.NewOwner(), plain) || !acquire(handed, store.NewOwner(), plain) {
		t.Fatal("refused once the lease and the claim window had ended")
	}
}
