package keycap_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

func TestWeightAndParentFieldsAreChecked(t *testing.T) {
	parent := keycap.MustParent("exports", 10)
	for _, tc := range []struct {
		name  string
		spec  keycap.Spec
		field string
	}{
		{"weight above max", keycap.Spec{Max: 3, Weight: 4}, "Weight"},
		{"negative weight", keycap.Spec{Max: 3, Weight: -1}, "Weight"},
		{"child above its parent", keycap.Spec{Max: 11, Parent: parent}, "Max"},
		{"share without a parent", keycap.Spec{Max: 3, Share: 2}, "Share"},
		{"minimum without a parent", keycap.Spec{Max: 3, Minimum: 1}, "Minimum"},
		{"negative share", keycap.Spec{Max: 3, Parent: parent, Share: -1}, "Share"},
		{"minimum above max", keycap.Spec{Max: 3, Parent: parent, Minimum: 4}, "Minimum"},
		{"zero parent", keycap.Spec{Max: 3, Parent: &keycap.Parent{}}, "Parent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Name = "l"
			err := tc.spec.Validate()
			var ie *keycap.InvalidLimitError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("Validate: %v, want an InvalidLimitError on %q", err, tc.field)
			}
		})
	}
	// A weight or a share of 0 is now the default, 1.
	for _, sp := range []keycap.Spec{{Name: "l", Max: 3, Weight: 0}, {Name: "l", Max: 3, Parent: parent, Share: 0}} {
		if err := sp.Validate(); err != nil {
			t.Errorf("%+v: %v, want valid (0 is 1)", sp, err)
		}
		if got := sp.For("k").Spec(); got.Weight != 1 || (sp.Parent != nil && got.Share != 1) {
			t.Errorf("%+v: weight %d share %d, want 1", sp, got.Weight, got.Share)
		}
	}
	if _, err := keycap.NewParent("", 3); err == nil {
		t.Error("NewParent accepted an empty name")
	}
	if _, err := keycap.NewParent("p", 0); err == nil {
		t.Error("NewParent accepted max 0")
	}
	lim := keycap.Spec{Name: "l", Max: 5, Parent: parent, Weight: 2, Share: 3, Minimum: 1}.For("k")
	if sp := lim.Spec(); sp.Parent == nil || sp.Parent.Name() != "exports" || sp.Weight != 2 || sp.Share != 3 || sp.Minimum != 1 {
		t.Errorf("spec: %v weight %d share %d min %d", sp.Parent, sp.Weight, sp.Share, sp.Minimum)
	}
	// A plain limit's spec: weight 1, no parent, so no share (0) and no
	// minimum.
	if plain := (keycap.Spec{Name: "l", Max: 5}).For("k").Spec(); plain.Parent != nil || plain.Weight != 1 || plain.Share != 0 || plain.Minimum != 0 {
		t.Errorf("a plain limit: parent %v weight %d share %d min %d", plain.Parent, plain.Weight, plain.Share, plain.Minimum)
	}
}

func TestWeightedLeasesShareAPool(t *testing.T) {
	l, rec := newLimiter(t, memstore.New())
	export := keycap.Spec{Name: "api", Max: 4, Weight: 3}.For("acme")
	read := keycap.Spec{Name: "api", Max: 4}.For("acme")
	e, err := l.Acquire(context.Background(), export)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Acquire(context.Background(), read)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(context.Background(), read); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("a read past 3+1 of 4: %v", err)
	}
	e.Release()
	for range 3 {
		if _, err := l.Acquire(context.Background(), read); err != nil {
			t.Fatalf("reads after the export's release: %v", err)
		}
	}
	r.Release()
	if got := rec.Count(keycap.LimitExceeded, "api"); got != 1 {
		t.Errorf("%d refusals reported, want 1", got)
	}
}

func TestSharedLimitsNeedAStoreThatKeepsThem(t *testing.T) {
	l, _ := newLimiter(t, plainStore{memstore.New()})
	for _, lim := range []keycap.Limit{
		keycap.Spec{Name: "l", Max: 3, Weight: 2}.For("k"),
		keycap.Spec{Name: "l", Max: 3, Parent: keycap.MustParent("p", 3)}.For("k"),
	} {
		_, err := l.Acquire(context.Background(), lim)
		var nse *store.NotSupportedError
		if !errors.Is(err, keycap.ErrNotSupported) || !errors.As(err, &nse) || nse.Feature != store.Shares {
			t.Errorf("Acquire on a store without shares: %v, want ErrNotSupported naming shares", err)
		}
	}
	l2, _ := newLimiter(t, memstore.New())
	p := keycap.MustParent("p", 3)
	_, err := l2.Acquire(context.Background(), keycap.Spec{Name: "a", Max: 3, Parent: p}.For("k"), keycap.Spec{Name: "b", Max: 3, Parent: p}.For("k"))
	if !errors.Is(err, keycap.ErrInvalidLimit) {
		t.Errorf("two limits of one parent in one Acquire: %v", err)
	}
	if _, err := frontdoor.AcquireMember(context.Background(), l2, "m", keycap.Spec{Name: "a", Max: 3, Weight: 2}.For("k")); !errors.Is(err, keycap.ErrInvalidLimit) {
		t.Errorf("AcquireMember with a weight: %v", err)
	}
}

// TestWaiterOfAnotherKeyIsWokenByTheParent: a waiter of one key is handed
// the slot another key of the parent releases, at once.
func TestWaiterOfAnotherKeyIsWokenByTheParent(t *testing.T) {
	st := &queueSignal{Store: memstore.New(), queued: make(chan struct{}, 10)}
	l, _ := newLimiter(t, st)
	p := keycap.MustParent("total", 2)
	a := keycap.Spec{Name: "per-tenant", Max: 2, Parent: p}.For("a")
	b := keycap.Spec{Name: "per-tenant", Max: 2, Parent: p, Wait: 10 * time.Second}.For("b")
	var held []*keycap.Lease
	for range 2 {
		ls, err := l.Acquire(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	if _, err := l.Acquire(context.Background(), keycap.Spec{Name: "per-tenant", Max: 2, Parent: p}.For("c")); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("a third key with the parent full: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(context.Background(), b)
		if err == nil {
			ls.Release()
		}
		got <- err
	}()
	select {
	case <-st.queued: // b holds a ticket in its line
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter of b did not queue within 5s")
	}
	start := time.Now()
	held[0].Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter of b: %v", err)
		}
		if d := time.Since(start); d > keycap.LinePoll/2 {
			t.Errorf("woken after %s: by a poll, not by the handoff", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter of b was not served within 5s")
	}
	held[1].Release()
}

// queueSignal signals each refused Acquire of a shared demand that left a
// ticket.
type queueSignal struct {
	*memstore.Store
	queued chan struct{}
}

func (q *queueSignal) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	g, err := q.Store.Acquire(ctx, pool, owner, d)
	if !g.Granted && err == nil && d.Line.TTL > 0 && !d.Plain() {
		select {
		case q.queued <- struct{}{}:
		default:
		}
	}
	return g, err
}

// TestParentLeaseIsRenewed: the Limiter's renewals keep a lease of a
// parent's key, and of a weighted pool, past their TTL.
func TestParentLeaseIsRenewed(t *testing.T) {
	l, rec := newLimiter(t, memstore.New())
	p := keycap.MustParent("renewed", 3)
	for _, lim := range []keycap.Limit{
		keycap.Spec{Name: "kid", Max: 3, Parent: p, Weight: 3, TTL: 150 * time.Millisecond}.For("a"),
		keycap.Spec{Name: "weighted", Max: 3, Weight: 3, TTL: 150 * time.Millisecond}.For("a"),
	} {
		ls, err := l.Acquire(context.Background(), lim)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // three TTLs: only renewals keep it
		select {
		case <-ls.Lost():
			t.Fatalf("%s: lease lost", lim)
		default:
		}
		probe := keycap.Spec{Name: lim.Name(), Max: 3, TTL: time.Second, Parent: lim.Spec().Parent}.For("a")
		if _, err := l.Acquire(context.Background(), probe); !errors.Is(err, keycap.ErrLimitExceeded) {
			t.Fatalf("%s: a probe got in beside a renewed lease of weight 3: %v", lim, err)
		}
		ls.Release()
	}
	if n := rec.Count(keycap.LeaseLost, ""); n != 0 {
		t.Errorf("%d leases lost", n)
	}
}

// TestKeptSlotPassesOnAfterTheKeep: a light key's freed slot is kept for
// it, and when it does not come back, the waiting key is handed the slot
// once the keep is over, not at its next poll.
func TestKeptSlotPassesOnAfterTheKeep(t *testing.T) {
	st := &queueSignal{Store: memstore.New(), queued: make(chan struct{}, 10)}
	l, _ := newLimiter(t, st)
	p := keycap.MustParent("keep-passes-on", 2, keycap.WithKeep(50*time.Millisecond))
	light := keycap.Spec{Name: "k", Max: 2, Parent: p}.For("light")
	busy := keycap.Spec{Name: "k", Max: 2, Parent: p, Wait: 10 * time.Second}.For("busy")
	lightLease, err := l.Acquire(context.Background(), light)
	if err != nil {
		t.Fatal(err)
	}
	busyLease, err := l.Acquire(context.Background(), busy)
	if err != nil {
		t.Fatal(err)
	}
	defer busyLease.Release()
	got := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(context.Background(), busy)
		if err == nil {
			ls.Release()
		}
		got <- err
	}()
	testkit.Recv(t, st.queued, 5*time.Second, "the busy key's second caller to queue")
	start := time.Now()
	lightLease.Release() // light holds 0 against busy's 1: kept for light
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		if d < 50*time.Millisecond {
			t.Errorf("served after %s: the slot was not kept for the light key", d)
		}
		if d > keycap.LinePoll/2 {
			t.Errorf("served after %s: by a poll, not once the keep was over", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not served within 5s")
	}
}
