package keycap_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// TestDecisionBudgetBoundsAHungStore: a store that never answers costs a
// caller the decision budget, then the fail mode applies — open: the caller
// runs unguarded; closed: a *StoreError wrapping a *BudgetError — and the
// outage is reported once, however many calls hang.
func TestDecisionBudgetBoundsAHungStore(t *testing.T) {
	t.Parallel()
	fs := newFaultStore()
	fs.block.Store(true)
	go func() { // the blocking store signals each call; nobody needs it here
		for range fs.entered {
		}
	}()
	t.Cleanup(func() { close(fs.entered) })
	l, rec := newLimiter(t, fs, keycap.WithDecisionBudget(100*time.Millisecond))
	open := limit(t, keycap.Spec{Name: "open", Max: 1}, "k")
	closed := limit(t, keycap.Spec{Name: "closed", Max: 1, FailMode: keycap.FailClosed, Budget: 50 * time.Millisecond}, "k")

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			start := time.Now()
			ls, err := l.Acquire(context.Background(), open)
			if err != nil {
				t.Errorf("fail open: %v", err)
				return
			}
			if ls.Guarded() {
				t.Error("a lease taken while the store hung claims to be guarded")
			}
			ls.Release()
			// The budget, and the release's own budget: well under a second.
			if took := time.Since(start); took > time.Second {
				t.Errorf("fail open took %s with a budget of 100ms", took)
			}
		})
	}
	wg.Wait()
	start := time.Now()
	_, err := l.Acquire(context.Background(), closed)
	var be *keycap.BudgetError
	if !errors.Is(err, keycap.ErrStoreUnavailable) || !errors.As(err, &be) || be.Budget != 50*time.Millisecond {
		t.Fatalf("fail closed: %v, want a *StoreError wrapping a *BudgetError of 50ms", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("fail closed took %s with a budget of 50ms", took)
	}
	if n := rec.Count(keycap.StoreFailed, ""); n != 1 {
		t.Fatalf("StoreFailed reported %d times for one outage, want 1", n)
	}
}

// TestDecisionBudgetSparesInProcessStores: memstore's calls get no deadline
// (and cost none).
func TestDecisionBudgetSparesInProcessStores(t *testing.T) {
	var s keycap.Store = memstore.New()
	if !s.Features().Has(store.InProcess) {
		t.Fatal("memstore does not say it never blocks")
	}
	l, _ := newLimiter(t, s)
	lim := limit(t, keycap.Spec{Name: "m", Max: 1}, "k")
	acquire(t, l, lim).Release()
	if allocs := testing.AllocsPerRun(100, func() {
		ls, err := l.Acquire(context.Background(), lim)
		if err != nil {
			t.Fatal(err)
		}
		ls.Release()
	}); allocs > 1 {
		t.Fatalf("%v allocations per acquire+release on memstore: a deadline is being built", allocs)
	}
}

// partitionedStore is a faultStore of two partitions, "a" and "b", one of
// which can fail alone: pools whose first byte is even are in "a".
type partitionedStore struct {
	*faultStore
	failB bool
}

func (p *partitionedStore) Partition(pool store.PoolID) string {
	if pool[15]%2 == 0 {
		return "a"
	}
	return "b"
}

// Features adds Partitions to the faultStore's.
func (p *partitionedStore) Features() store.Features {
	return p.faultStore.Features() | store.Partitions
}

func (p *partitionedStore) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	if p.failB && p.Partition(pool) == "b" {
		return store.Grant{}, errDown
	}
	return p.faultStore.Acquire(ctx, pool, owner, d)
}

// TestOutagePerPartition: one failing node of a store is one outage, reported
// once while the other nodes answer, and a node that fails on and off is one
// outage too.
func TestOutagePerPartition(t *testing.T) {
	t.Parallel()
	ps := &partitionedStore{faultStore: newFaultStore(), failB: true}
	l, rec := newLimiter(t, ps, keycap.WithRecoverAfter(time.Hour))
	var inA, inB []keycap.Limit
	for i := 0; len(inA) < 50 || len(inB) < 50; i++ {
		lim := limit(t, keycap.Spec{Name: "p", Max: 5}, string(rune('a'+i%26))+string(rune(i)))
		if ps.Partition(lim.Pool()) == "a" {
			inA = append(inA, lim)
		} else {
			inB = append(inB, lim)
		}
	}
	for round := range 3 {
		for i := range 50 {
			acquire(t, l, inA[i]).Release()
			acquire(t, l, inB[i]).Release() // fails open
		}
		ps.failB = round != 1 // b fails, answers, fails again: one outage
	}
	if n := rec.Count(keycap.StoreFailed, ""); n != 1 {
		t.Fatalf("StoreFailed reported %d times, want 1 (node b, once)", n)
	}
	if e, _ := last(rec, keycap.StoreFailed); e.Node != "b" {
		t.Fatalf("StoreFailed names node %q, want b", e.Node)
	}
	if n := rec.Count(keycap.StoreRecovered, ""); n != 0 {
		t.Fatalf("StoreRecovered reported %d times while node b flaps", n)
	}
}

// TestLostAfterClose: leases still held when their Limiter closes are no
// longer renewed; Lost says so when their TTL runs out.
func TestLostAfterClose(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New())
	ls := acquire(t, l, limit(t, keycap.Spec{Name: "c", Max: 1, TTL: 100 * time.Millisecond}, "k"))
	_ = l.Close()
	select {
	case <-ls.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() not closed after the TTL of a lease of a closed Limiter")
	}
	ls.Release()
}

// TestFailedReleasesAreRetried: a release that the store fails is retried in
// the background, so that a store back from an outage does not keep the
// slots of holders that are done until their TTL runs out.
func TestFailedReleasesAreRetried(t *testing.T) {
	t.Parallel()
	fs := newFaultStore()
	l, _ := newLimiter(t, fs)
	lim := limit(t, keycap.Spec{Name: "r", Max: 1, TTL: time.Hour}, "k")
	ls := acquire(t, l, lim)
	fs.fail.Store(true)
	ls.Release() // fails
	fs.fail.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := l.Acquire(context.Background(), lim)
		if err == nil {
			got.Release()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot whose release failed is still held 5 s after the store came back (TTL 1 h): %v", err)
		}
		time.Sleep(20 * time.Millisecond) // the retry runs on its own schedule
	}
}

// A store that fails at once is a store failure, not a budget overrun: the
// event carries the store's own error, and nothing is released behind the
// caller's back (a background release, meant for a grant that may land
// after the budget, would free a slot that a heartbeat restored meanwhile).
func TestFastFailureIsNoBudgetOverrun(t *testing.T) {
	t.Parallel()
	s := newFaultStore()
	s.fail.Store(true)
	rec := &keycaptest.Recorder{}
	l, err := keycap.NewLimiter(s, keycap.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, wait := range []time.Duration{0, time.Second} { // a try, and a wait in a line
		lim := keycap.Spec{Name: "fast-failure", Max: 1, FailMode: keycap.FailClosed, Wait: wait}.For(fmt.Sprint(wait))
		_, err := l.Acquire(context.Background(), lim)
		var be *keycap.BudgetError
		if !errors.Is(err, keycap.ErrStoreUnavailable) || errors.As(err, &be) || !errors.Is(err, errDown) {
			t.Fatalf("wait %s: %v, want the store's own error, not a budget overrun", wait, err)
		}
	}
}
