package keycap_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
)

func TestWeightAndParentOptionsAreChecked(t *testing.T) {
	parent := keycap.MustParent("exports", 10)
	for _, tc := range []struct {
		name  string
		max   int
		opts  []keycap.LimitOption
		field string
	}{
		{"weight above max", 3, []keycap.LimitOption{keycap.WithWeight(4)}, "weight"},
		{"weight zero", 3, []keycap.LimitOption{keycap.WithWeight(0)}, "weight"},
		{"child above its parent", 11, []keycap.LimitOption{keycap.WithParent(parent)}, "max"},
		{"share without a parent", 3, []keycap.LimitOption{keycap.WithShare(2)}, "share"},
		{"minimum without a parent", 3, []keycap.LimitOption{keycap.WithMinimum(1)}, "minimum"},
		{"share zero", 3, []keycap.LimitOption{keycap.WithParent(parent), keycap.WithShare(0)}, "share"},
		{"minimum above max", 3, []keycap.LimitOption{keycap.WithParent(parent), keycap.WithMinimum(4)}, "minimum"},
		{"zero parent", 3, []keycap.LimitOption{keycap.WithParent(keycap.Parent{})}, "parent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := keycap.NewLimit("l", "k", tc.max, tc.opts...)
			var ie *keycap.InvalidLimitError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("NewLimit: %v, want an InvalidLimitError on %q", err, tc.field)
			}
		})
	}
	if _, err := keycap.NewParent("", 3); err == nil {
		t.Error("NewParent accepted an empty name")
	}
	if _, err := keycap.NewParent("p", 0); err == nil {
		t.Error("NewParent accepted max 0")
	}
	lim := keycap.MustLimit("l", "k", 5, keycap.WithParent(parent), keycap.WithWeight(2), keycap.WithShare(3), keycap.WithMinimum(1))
	if p, ok := lim.Parent(); !ok || p.Name() != "exports" || lim.Weight() != 2 || lim.Share() != 3 || lim.Minimum() != 1 {
		t.Errorf("accessors: %v %v weight %d share %d min %d", p, ok, lim.Weight(), lim.Share(), lim.Minimum())
	}
	if plain := keycap.MustLimit("l", "k", 5); plain.Weight() != 1 || plain.Share() != 1 || plain.Minimum() != 0 {
		t.Errorf("a plain limit: weight %d share %d min %d", plain.Weight(), plain.Share(), plain.Minimum())
	}
}

func TestWeightedLeasesShareAPool(t *testing.T) {
	l, rec := newLimiter(t, memstore.New())
	export := keycap.MustLimit("api", "acme", 4, keycap.WithWeight(3))
	read := keycap.MustLimit("api", "acme", 4)
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
		keycap.MustLimit("l", "k", 3, keycap.WithWeight(2)),
		keycap.MustLimit("l", "k", 3, keycap.WithParent(keycap.MustParent("p", 3))),
	} {
		_, err := l.Acquire(context.Background(), lim)
		if !errors.Is(err, keycap.ErrInvalidLimit) || !strings.Contains(err.Error(), "does not keep") {
			t.Errorf("Acquire on a store that is no Sharer: %v", err)
		}
	}
	l2, _ := newLimiter(t, memstore.New())
	p := keycap.MustParent("p", 3)
	_, err := l2.Acquire(context.Background(), keycap.MustLimit("a", "k", 3, keycap.WithParent(p)), keycap.MustLimit("b", "k", 3, keycap.WithParent(p)))
	if !errors.Is(err, keycap.ErrInvalidLimit) {
		t.Errorf("two limits of one parent in one Acquire: %v", err)
	}
	if _, err := l2.AcquireAs(context.Background(), "m", keycap.MustLimit("a", "k", 3, keycap.WithWeight(2))); !errors.Is(err, keycap.ErrInvalidLimit) {
		t.Errorf("AcquireAs with a weight: %v", err)
	}
}

// plainStore hides every optional interface of its store.
type plainStore struct{ keycap.Store }

// TestWaiterOfAnotherKeyIsWokenByTheParent: a waiter of one key is handed
// the slot another key of the parent releases, at once.
func TestWaiterOfAnotherKeyIsWokenByTheParent(t *testing.T) {
	store := &queueSignal{Store: memstore.New(), queued: make(chan struct{}, 10)}
	l, _ := newLimiter(t, store)
	p := keycap.MustParent("total", 2)
	a := keycap.MustLimit("per-tenant", "a", 2, keycap.WithParent(p))
	b := keycap.MustLimit("per-tenant", "b", 2, keycap.WithParent(p), keycap.WithWait(10*time.Second))
	var held []*keycap.Lease
	for range 2 {
		ls, err := l.Acquire(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	if _, err := l.Acquire(context.Background(), keycap.MustLimit("per-tenant", "c", 2, keycap.WithParent(p))); !errors.Is(err, keycap.ErrLimitExceeded) {
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
	case <-store.queued: // b holds a ticket in its line
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

// queueSignal signals each refused AcquireDemand that left a ticket.
type queueSignal struct {
	*memstore.Store
	queued chan struct{}
}

func (q *queueSignal) AcquireDemand(ctx context.Context, d keycap.Demand, tk *keycap.Ticket) (bool, int, error) {
	ok, ahead, err := q.Store.AcquireDemand(ctx, d, tk)
	if !ok && err == nil && tk != nil {
		select {
		case q.queued <- struct{}{}:
		default:
		}
	}
	return ok, ahead, err
}

// TestParentLeaseIsRenewed: the Limiter's renewals keep a lease of a
// parent's key, and of a weighted pool, past their TTL.
func TestParentLeaseIsRenewed(t *testing.T) {
	l, rec := newLimiter(t, memstore.New())
	p := keycap.MustParent("renewed", 3)
	for _, lim := range []keycap.Limit{
		keycap.MustLimit("kid", "a", 3, keycap.WithParent(p), keycap.WithWeight(3), keycap.WithTTL(150*time.Millisecond)),
		keycap.MustLimit("weighted", "a", 3, keycap.WithWeight(3), keycap.WithTTL(150*time.Millisecond)),
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
		probe := keycap.MustLimit(lim.Name(), "a", 3, append([]keycap.LimitOption{keycap.WithTTL(time.Second)}, parentOf(lim)...)...)
		if _, err := l.Acquire(context.Background(), probe); !errors.Is(err, keycap.ErrLimitExceeded) {
			t.Fatalf("%s: a probe got in beside a renewed lease of weight 3: %v", lim, err)
		}
		ls.Release()
	}
	if n := rec.Count(keycap.LeaseLost, ""); n != 0 {
		t.Errorf("%d leases lost", n)
	}
}

func parentOf(lim keycap.Limit) []keycap.LimitOption {
	if p, ok := lim.Parent(); ok {
		return []keycap.LimitOption{keycap.WithParent(p)}
	}
	return nil
}

// TestKeptSlotPassesOnAfterTheKeep: a light key's freed slot is kept for
// it, and when it does not come back, the waiting key is handed the slot
// once the keep is over, not at its next poll.
func TestKeptSlotPassesOnAfterTheKeep(t *testing.T) {
	store := &queueSignal{Store: memstore.New(), queued: make(chan struct{}, 10)}
	l, _ := newLimiter(t, store)
	p := keycap.MustParent("keep-passes-on", 2, keycap.WithKeep(50*time.Millisecond))
	light := keycap.MustLimit("k", "light", 2, keycap.WithParent(p))
	busy := keycap.MustLimit("k", "busy", 2, keycap.WithParent(p), keycap.WithWait(10*time.Second))
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
	testkit.Recv(t, store.queued, 5*time.Second, "the busy key's second caller to queue")
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
