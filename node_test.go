package keycap_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
)

// TestMemberLeases: a node's member leases are kept by its heartbeat, not
// renewed one by one, dropped as ghosts when their release is lost, and
// withdrawn together.
func TestMemberLeases(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	l, rec := newLimiter(t, store, keycap.WithHeartbeat(time.Hour), keycap.WithNode("node-a"))
	other, _ := newLimiter(t, store, keycap.WithNode("node-b"))
	lim := limit(t, "m", "k", 2, keycap.WithTTL(2*time.Hour))
	ctx := context.Background()
	if l.Node() != "node-a" {
		t.Fatalf("node %q", l.Node())
	}
	if _, err := l.AcquireAs(ctx, "a", lim); err != nil {
		t.Fatal(err)
	}
	// The same member again takes no second slot.
	if _, err := l.AcquireAs(ctx, "a", lim); err != nil {
		t.Fatalf("a member acquired again extends its slot: %v", err)
	}
	b, err := l.AcquireAs(ctx, "b", lim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("a third holder with a max of 2: %v", err)
	}
	b.Release()
	if err := l.Heartbeat(ctx); err != nil { // keeps "a", the node's live member
		t.Fatal(err)
	}
	if ls, err := other.Acquire(ctx, lim); err != nil {
		t.Fatalf("after b's release one slot is free: %v", err)
	} else {
		ls.Release()
	}
	if _, err := other.Acquire(ctx, limit(t, "m", "k", 1, keycap.WithTTL(2*time.Hour))); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("the heartbeat dropped the live member a: %v", err)
	}
	if err := l.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := other.Acquire(ctx, lim); err != nil {
			t.Fatalf("after Withdraw the node's slots are free: %v", err)
		}
	}
	if n := rec.Count(keycap.LeaseLost, ""); n != 0 {
		t.Fatalf("%d member leases reported lost", n)
	}
}

// TestMemberGhostDropped: a member whose release never reached the store
// holds its slot until the next heartbeat, which drops it and says so.
func TestMemberGhostDropped(t *testing.T) {
	t.Parallel()
	store := &lossyRelease{Store: memstore.New()}
	l, rec := newLimiter(t, store, keycap.WithHeartbeat(time.Hour))
	lim := limit(t, "g", "k", 1, keycap.WithTTL(2*time.Hour))
	ctx := context.Background()
	ls, err := l.AcquireAs(ctx, "m", lim)
	if err != nil {
		t.Fatal(err)
	}
	store.drop = true
	ls.Release()
	store.drop = false
	if _, err := l.AcquireAs(ctx, "n", lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("the ghost should hold its slot until the heartbeat: %v", err)
	}
	if err := l.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rec.Count(keycap.GhostsDropped, "g"); n != 1 {
		t.Fatalf("GhostsDropped reported %d times, want 1", n)
	}
	if _, err := l.AcquireAs(ctx, "n", lim); err != nil {
		t.Fatalf("after the heartbeat: %v", err)
	}
}

type lossyRelease struct {
	keycap.Store
	drop bool
}

func (s *lossyRelease) Release(ctx context.Context, p keycap.PoolID, o keycap.Owner) error {
	if s.drop {
		return nil
	}
	return s.Store.Release(ctx, p, o)
}

func (s *lossyRelease) Sync(ctx context.Context, n keycap.NodeID, ttl time.Duration, b []keycap.SyncPool) error {
	return s.Store.(keycap.Syncer).Sync(ctx, n, ttl, b)
}

func TestMemberLeasesNeedASyncerAndALongTTL(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New(), keycap.WithHeartbeat(time.Minute))
	if _, err := l.AcquireAs(context.Background(), "m", limit(t, "s", "k", 1, keycap.WithTTL(time.Minute))); !errors.Is(err, keycap.ErrInvalidLimit) {
		t.Fatalf("a member TTL equal to the heartbeat: %v", err)
	}
	type plain struct{ keycap.Store }
	p, _ := newLimiter(t, plain{memstore.New()})
	if _, err := p.AcquireAs(context.Background(), "m", limit(t, "s", "k", 1, keycap.WithTTL(time.Hour))); !errors.Is(err, keycap.ErrInvalidLimit) {
		t.Fatalf("a store that cannot sync: %v", err)
	}
}

// TestMemberLeaseDefaultTTL: a limit built without WithTTL works as a member
// limit out of the box: its lease lives three heartbeats, not DefaultTTL
// (which equals the default heartbeat), and the caller's limits are not
// changed.
func TestMemberLeaseDefaultTTL(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New())
	lims := []keycap.Limit{limit(t, "s", "k", 1), limit(t, "s", "j", 1, keycap.WithTTL(time.Hour))}
	ls, err := l.AcquireAs(context.Background(), "m", lims...)
	if err != nil {
		t.Fatalf("a member limit with the default TTL: %v", err)
	}
	defer ls.Release()
	got := ls.Limits()
	if got[0].TTL() != keycap.MemberTTLBeats*keycap.DefaultHeartbeat || got[1].TTL() != time.Hour {
		t.Fatalf("member TTLs %s and %s, want %s and 1h", got[0].TTL(), got[1].TTL(), keycap.MemberTTLBeats*keycap.DefaultHeartbeat)
	}
	if lims[0].TTL() != keycap.DefaultTTL {
		t.Fatalf("the caller's limit was changed: TTL %s", lims[0].TTL())
	}
}
