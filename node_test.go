package keycap_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// TestMemberLeases: a node's member leases are kept by its heartbeat, not
// renewed one by one, dropped as ghosts when their release is lost, and
// withdrawn together.
func TestMemberLeases(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	l, rec := newLimiter(t, st, keycap.WithHeartbeat(time.Hour), keycap.WithNode("node-a"))
	other, _ := newLimiter(t, st, keycap.WithNode("node-b"))
	lim := limit(t, keycap.Spec{Name: "m", Max: 2, TTL: 2 * time.Hour}, "k")
	ctx := context.Background()
	if frontdoor.Node(l) != "node-a" {
		t.Fatalf("node %q", frontdoor.Node(l))
	}
	if _, err := frontdoor.AcquireMember(ctx, l, "a", lim); err != nil {
		t.Fatal(err)
	}
	// The same member again takes no second slot.
	if _, err := frontdoor.AcquireMember(ctx, l, "a", lim); err != nil {
		t.Fatalf("a member acquired again extends its slot: %v", err)
	}
	b, err := frontdoor.AcquireMember(ctx, l, "b", lim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("a third holder with a max of 2: %v", err)
	}
	b.Release()
	if err := frontdoor.Heartbeat(ctx, l); err != nil { // keeps "a", the node's live member
		t.Fatal(err)
	}
	if ls, err := other.Acquire(ctx, lim); err != nil {
		t.Fatalf("after b's release one slot is free: %v", err)
	} else {
		ls.Release()
	}
	if _, err := other.Acquire(ctx, limit(t, keycap.Spec{Name: "m", Max: 1, TTL: 2 * time.Hour}, "k")); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("the heartbeat dropped the live member a: %v", err)
	}
	if err := frontdoor.Withdraw(ctx, l); err != nil {
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
	st := &lossyRelease{Store: memstore.New()}
	l, rec := newLimiter(t, st, keycap.WithHeartbeat(time.Hour))
	lim := limit(t, keycap.Spec{Name: "g", Max: 1, TTL: 2 * time.Hour}, "k")
	ctx := context.Background()
	ls, err := frontdoor.AcquireMember(ctx, l, "m", lim)
	if err != nil {
		t.Fatal(err)
	}
	st.drop = true
	ls.Release()
	st.drop = false
	if _, err := frontdoor.AcquireMember(ctx, l, "n", lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("the ghost should hold its slot until the heartbeat: %v", err)
	}
	if err := frontdoor.Heartbeat(ctx, l); err != nil {
		t.Fatal(err)
	}
	if n := rec.Count(keycap.GhostsDropped, "g"); n != 1 {
		t.Fatalf("GhostsDropped reported %d times, want 1", n)
	}
	if _, err := frontdoor.AcquireMember(ctx, l, "n", lim); err != nil {
		t.Fatalf("after the heartbeat: %v", err)
	}
}

// lossyRelease is a store of member leases whose releases can be lost.
type lossyRelease struct {
	store.Store
	drop bool
}

// Features declares members only, which the embedded store forwards.
func (s *lossyRelease) Features() store.Features { return store.Members }

func (s *lossyRelease) Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	if s.drop {
		return false, nil
	}
	return s.Store.Release(ctx, pool, owner, d, leave)
}

func TestMemberLeasesNeedMembersAndALongTTL(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New(), keycap.WithHeartbeat(time.Minute))
	if _, err := frontdoor.AcquireMember(context.Background(), l, "m", limit(t, keycap.Spec{Name: "s", Max: 1, TTL: time.Minute}, "k")); !errors.Is(err, keycap.ErrInvalidLimit) {
		t.Fatalf("a member TTL equal to the heartbeat: %v", err)
	}
	p, _ := newLimiter(t, plainStore{memstore.New()})
	if _, err := frontdoor.AcquireMember(context.Background(), p, "m", limit(t, keycap.Spec{Name: "s", Max: 1, TTL: time.Hour}, "k")); !errors.Is(err, keycap.ErrNotSupported) {
		t.Fatalf("a store that cannot sync: %v, want ErrNotSupported", err)
	}
}

// TestMemberLeaseDefaultTTL: a limit whose spec sets no TTL works as a member
// limit out of the box: its lease lives three heartbeats, not DefaultTTL
// (which equals the default heartbeat), and the caller's limits are not
// changed.
func TestMemberLeaseDefaultTTL(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New())
	lims := []keycap.Limit{limit(t, keycap.Spec{Name: "s", Max: 1}, "k"), limit(t, keycap.Spec{Name: "s", Max: 1, TTL: time.Hour}, "j")}
	ls, err := frontdoor.AcquireMember(context.Background(), l, "m", lims...)
	if err != nil {
		t.Fatalf("a member limit with the default TTL: %v", err)
	}
	defer ls.Release()
	got := ls.Limits()
	if got[0].Spec().TTL != keycap.MemberTTLBeats*keycap.DefaultHeartbeat || got[1].Spec().TTL != time.Hour {
		t.Fatalf("member TTLs %s and %s, want %s and 1h", got[0].Spec().TTL, got[1].Spec().TTL, keycap.MemberTTLBeats*keycap.DefaultHeartbeat)
	}
	if lims[0].Spec().TTL != keycap.DefaultTTL {
		t.Fatalf("the caller's limit was changed: TTL %s", lims[0].Spec().TTL)
	}
}
