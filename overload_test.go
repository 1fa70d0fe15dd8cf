package keycap_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// unansweredStore is a store whose acquires, while hung, never answer: each
// waits for its context to end and then says, as redisstore does, how long
// before the deadline its request was sent (store.UnansweredError): sent
// of the budget it was given. 0 is a request that never left the process.
// Its releases, while hung, never leave the process: they answer nothing,
// so that none ends an outage.
type unansweredStore struct {
	store.Store
	hung atomic.Bool
	sent atomic.Int64 // a fraction of the budget, in thousandths
}

func (u *unansweredStore) Features() store.Features { return 0 }

func (u *unansweredStore) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	if !u.hung.Load() {
		return u.Store.Acquire(ctx, pool, owner, d)
	}
	start := time.Now()
	<-ctx.Done()
	dl, _ := ctx.Deadline()
	budget := dl.Sub(start)
	return store.Grant{}, &store.UnansweredError{Err: ctx.Err(), Outstanding: budget * time.Duration(u.sent.Load()) / 1000}
}

func (u *unansweredStore) Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	if !u.hung.Load() {
		return u.Store.Release(ctx, pool, owner, d, leave)
	}
	<-ctx.Done()
	return false, &store.UnansweredError{Err: ctx.Err()}
}

// TestBudgetSpentInProcessIsNoOutage: a call whose budget ran out while its
// request waited in the process (sent late, or never) gets the fail mode
// within the budget, as any call that ran out of it, but it is reported as
// ProcessOverloaded, not as a store outage: no StoreFailed, and an outage
// under way neither ends nor counts it. One that the store had for most of
// the budget is the store's failure.
func TestBudgetSpentInProcessIsNoOutage(t *testing.T) {
	t.Parallel()
	us := &unansweredStore{Store: memstore.New()}
	const budget = 100 * time.Millisecond
	l, rec := newLimiter(t, us, keycap.WithDecisionBudget(budget), keycap.WithRecoverAfter(time.Millisecond))
	open := limit(t, keycap.Spec{Name: "open", Max: 1}, "k")
	closed := limit(t, keycap.Spec{Name: "closed", Max: 1, FailMode: keycap.FailClosed}, "k")
	ctx := context.Background()

	us.hung.Store(true)
	for _, sent := range []int64{0, 400} { // never sent; sent with 40 % of the budget left
		us.sent.Store(sent)
		start := time.Now()
		ls, err := l.Acquire(ctx, open)
		if err != nil || ls.Guarded() {
			t.Fatalf("sent %d‰: fail open: %v, guarded %v", sent, err, err == nil && ls.Guarded())
		}
		ls.Release()
		_, err = l.Acquire(ctx, closed)
		var be *keycap.BudgetError
		if !errors.Is(err, keycap.ErrStoreUnavailable) || !errors.As(err, &be) || !be.Overloaded {
			t.Fatalf("sent %d‰: fail closed: %v, want a *StoreError wrapping an overloaded *BudgetError", sent, err)
		}
		if be.Budget != budget || be.Waited < budget || be.StoreTime >= budget/2 {
			t.Fatalf("sent %d‰: %+v: want the budget, a wait of at least it, and the store's time under half of it", sent, be)
		}
		// Both calls, and the releases, bounded by the budget.
		if took := time.Since(start); took > 5*budget {
			t.Fatalf("sent %d‰: two decisions took %s with a budget of %s", sent, took, budget)
		}
	}
	if n := rec.Count(keycap.StoreFailed, ""); n != 0 {
		t.Fatalf("%d StoreFailed for budgets spent in the process, want none", n)
	}
	// Four acquires, and the releases of what they might have been granted,
	// in the background.
	if n := rec.Count(keycap.ProcessOverloaded, ""); n < 4 {
		t.Fatalf("%d ProcessOverloaded for 4 calls that ran out of budget in the process, want one each", n)
	}
	for _, e := range rec.Events() {
		if be := (*keycap.BudgetError)(nil); e.Kind == keycap.ProcessOverloaded && (!errors.As(e.Err, &be) || e.Waited != be.Waited || e.Limit.Name() == "") {
			t.Fatalf("ProcessOverloaded = %+v, want the limit and its *BudgetError", e)
		}
	}

	// A store that had the request from the start: its failure. With a
	// budget of a second, which only a process stalled for half of it
	// would not give the store.
	us.sent.Store(1000)
	long := limit(t, keycap.Spec{Name: "long", Max: 1, FailMode: keycap.FailClosed, Budget: time.Second}, "k")
	_, err := l.Acquire(ctx, long)
	var be *keycap.BudgetError
	if !errors.Is(err, keycap.ErrStoreUnavailable) || !errors.As(err, &be) || be.Overloaded || be.StoreTime < time.Second/2 {
		t.Fatalf("a store that had the call for its budget: %v (%+v), want a store failure", err, be)
	}
	if n := rec.Count(keycap.StoreFailed, ""); n != 1 {
		t.Fatalf("%d StoreFailed after the store held a call for its budget, want 1", n)
	}
	// An outage under way: a call lost in the process neither counts in it
	// nor ends it; the store's next answer does.
	us.sent.Store(0)
	if _, err := l.Acquire(ctx, closed); !errors.As(err, &be) || !be.Overloaded {
		t.Fatalf("during the outage: %v, want an overloaded *BudgetError", err)
	}
	if n := rec.Count(keycap.StoreRecovered, ""); n != 0 {
		t.Fatalf("a call lost in the process ended the outage")
	}
	us.hung.Store(false)
	testkit.WaitUntil(t, 10*time.Second, "the outage's end", func() bool {
		acquire(t, l, closed).Release()
		return rec.Count(keycap.StoreRecovered, "") == 1
	})
	if e, _ := last(rec, keycap.StoreRecovered); e.Failures != 1 {
		t.Fatalf("the outage counted %d failed calls, want 1: the call lost in the process is not one", e.Failures)
	}
}

// asyncUnansweredStore releases without waiting (store.AsyncRelease), and
// reports every such release, at its budget, as never sent.
type asyncUnansweredStore struct{ store.Store }

func (asyncUnansweredStore) Features() store.Features { return store.AsyncRelease }

func (asyncUnansweredStore) ReleaseAsync(pool store.PoolID, owner store.Owner, d store.Demand, budget time.Duration, done func(error)) {
	// The store keeps the budget: at its end, the release was never sent.
	time.AfterFunc(budget, func() { done(&store.UnansweredError{Err: context.DeadlineExceeded}) })
}

// TestAsyncReleaseSpentInProcessIsNoOutage: a release sent without waiting,
// which the store never sent within its budget, is no outage either.
func TestAsyncReleaseSpentInProcessIsNoOutage(t *testing.T) {
	t.Parallel()
	as := asyncUnansweredStore{Store: memstore.New()}
	l, rec := newLimiter(t, as, keycap.WithDecisionBudget(50*time.Millisecond))
	acquire(t, l, limit(t, keycap.Spec{Name: "async", Max: 1}, "k")).Release()
	testkit.WaitUntil(t, 10*time.Second, "the release's verdict", func() bool { return rec.Count(keycap.ProcessOverloaded, "async") == 1 })
	if n := rec.Count(keycap.StoreFailed, ""); n != 0 {
		t.Fatalf("%d StoreFailed for a release that never left the process, want none", n)
	}
}
