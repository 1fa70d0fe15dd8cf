package keycap_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

func TestSpecValidateNamesTheInvalidField(t *testing.T) {
	t.Parallel()
	parent := keycap.MustParent("validate-parent", 10)
	cases := []struct {
		name  string
		spec  keycap.Spec
		field string
	}{
		{"empty name", keycap.Spec{Max: 1}, "Name"},
		{"negative max", keycap.Spec{Name: "n", Max: -1}, "Max"},
		{"ttl below 1ms", keycap.Spec{Name: "n", Max: 1, TTL: 999 * time.Microsecond}, "TTL"},
		{"negative ttl", keycap.Spec{Name: "n", Max: 1, TTL: -time.Second}, "TTL"},
		{"ttl above MaxTTL", keycap.Spec{Name: "n", Max: 1, TTL: keycap.MaxTTL + time.Millisecond}, "TTL"},
		{"negative wait", keycap.Spec{Name: "n", Max: 1, Wait: -time.Second}, "Wait"},
		{"negative budget", keycap.Spec{Name: "n", Max: 1, Budget: -time.Second}, "Budget"},
		{"unknown fail mode", keycap.Spec{Name: "n", Max: 1, FailMode: 7}, "FailMode"},
		{"unknown family", keycap.Spec{Name: "n", Max: 1, Family: 99}, "Family"},
		{"negative weight", keycap.Spec{Name: "n", Max: 3, Weight: -1}, "Weight"},
		{"weight above max", keycap.Spec{Name: "n", Max: 3, Weight: 4}, "Weight"},
		{"share without a parent", keycap.Spec{Name: "n", Max: 3, Share: 2}, "Share"},
		{"minimum without a parent", keycap.Spec{Name: "n", Max: 3, Minimum: 1}, "Minimum"},
		{"zero parent", keycap.Spec{Name: "n", Max: 3, Parent: &keycap.Parent{}}, "Parent"},
		{"max above its parent's", keycap.Spec{Name: "n", Max: 11, Parent: parent}, "Max"},
		{"negative share", keycap.Spec{Name: "n", Max: 3, Parent: parent, Share: -1}, "Share"},
		{"minimum above max", keycap.Spec{Name: "n", Max: 3, Parent: parent, Minimum: 4}, "Minimum"},
		{"negative minimum", keycap.Spec{Name: "n", Max: 3, Parent: parent, Minimum: -1}, "Minimum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			var ie *keycap.InvalidLimitError
			if !errors.Is(err, keycap.ErrInvalidLimit) || !errors.As(err, &ie) {
				t.Fatalf("Validate = %v, want an *InvalidLimitError", err)
			}
			if ie.Field != tc.field {
				t.Fatalf("error names field %q, want %q (%v)", ie.Field, tc.field, err)
			}

			// For never fails: the limit it makes returns Validate's error
			// from Acquire and Do, without a store call.
			fs := newFaultStore()
			l, _ := newLimiter(t, fs)
			lim := tc.spec.For("k")
			if _, aerr := l.Acquire(context.Background(), lim); aerr == nil || aerr.Error() != err.Error() || !errors.Is(aerr, keycap.ErrInvalidLimit) {
				t.Fatalf("Acquire = %v, want %v", aerr, err)
			}
			ran := false
			derr := l.Do(context.Background(), func(context.Context) error { ran = true; return nil }, lim)
			if derr == nil || derr.Error() != err.Error() || !errors.Is(derr, keycap.ErrInvalidLimit) || ran {
				t.Fatalf("Do = %v (ran %t), want %v without running", derr, ran, err)
			}
			var die *keycap.InvalidLimitError
			if !errors.As(derr, &die) || *die != *ie {
				t.Fatalf("Do's error %+v, want %+v", die, ie)
			}
			if n := fs.acquires.Load(); n != 0 {
				t.Fatalf("%d store calls for an invalid spec", n)
			}
		})
	}
	spec := keycap.Spec{Name: "n", Max: 0, TTL: time.Millisecond, Wait: 0}
	if err := spec.Validate(); err != nil {
		t.Fatalf("valid spec refused: %v", err)
	}
	l := spec.For("")
	if l.Spec().TTL != time.Millisecond || l.Max() != 0 || l.Key() != "" {
		t.Fatalf("limit fields not kept: %+v", l)
	}
	// TTL 0 is no longer invalid: it is the default.
	zero := keycap.Spec{Name: "n", Max: 1, TTL: 0}
	if err := zero.Validate(); err != nil {
		t.Fatalf("TTL 0 refused: %v", err)
	}
	if d := zero.For("k").Spec().TTL; d != keycap.DefaultTTL {
		t.Fatalf("default TTL = %s, want %s", d, keycap.DefaultTTL)
	}
}

func TestMaxZeroRefusesWithoutStoreCall(t *testing.T) {
	t.Parallel()
	fs := newFaultStore()
	l, rec := newLimiter(t, fs)
	zero := limit(t, keycap.Spec{Name: "z", Max: 0, Wait: time.Hour}, "k")
	other := limit(t, keycap.Spec{Name: "o", Max: 5, Wait: time.Hour}, "k")
	start := time.Now()
	le := refused(t, l, zero, other, zero)
	if le.Waited != 0 || time.Since(start) > time.Second {
		t.Fatalf("max 0 waited %s", le.Waited)
	}
	if n := fs.acquires.Load(); n != 0 {
		t.Fatalf("%d store calls for a max-0 limit", n)
	}
	if rec.Count(keycap.LimitExceeded, "") != 1 {
		t.Fatalf("LimitExceeded reported %d times", rec.Count(keycap.LimitExceeded, ""))
	}
}

func TestAllOrNothing(t *testing.T) {
	t.Parallel()
	l, rec := newLimiter(t, memstore.New())
	user := limit(t, keycap.Spec{Name: "exports", Max: 1}, "user:1")
	team := limit(t, keycap.Spec{Name: "exports", Max: 1}, "team:1")
	held := acquire(t, l, team)
	refused(t, l, team, user, team)
	// The user's slot, taken before the team refused, was given back.
	ls := acquire(t, l, user)
	ls.Release()
	held.Release()
	ls = acquire(t, l, user, team)
	if got := ls.Limits(); len(got) != 2 || !ls.Guarded() {
		t.Fatalf("lease limits %v guarded %v", got, ls.Guarded())
	}
	ls.Release()
	if a, r := rec.Count(keycap.SlotAcquired, ""), rec.Count(keycap.SlotReleased, ""); a != r || a != 4 {
		t.Fatalf("acquired %d, released %d events; want 4 and 4", a, r)
	}
}

func TestProgrammingErrors(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New())
	a := limit(t, keycap.Spec{Name: "n", Max: 1}, "k")
	b := limit(t, keycap.Spec{Name: "n", Max: 2, TTL: time.Second}, "k") // same pool, other settings
	if _, err := l.Acquire(context.Background(), a, b); !errors.Is(err, keycap.ErrInvalidLimit) {
		t.Fatalf("two limits on one pool: %v", err)
	}
	if _, err := l.Acquire(context.Background(), keycap.Limit{}); !errors.Is(err, keycap.ErrInvalidLimit) {
		t.Fatalf("zero Limit: %v", err)
	}
	if _, err := keycap.NewLimiter(nil); err == nil {
		t.Fatal("NewLimiter(nil) accepted")
	}
	if _, err := keycap.NewLimiter(memstore.New(), keycap.WithDefaultFailMode(keycap.FailDefault)); err == nil {
		t.Fatal("default fail mode FailDefault accepted")
	}
	ls := acquire(t, l) // no limits: an empty lease
	ls.Release()
}

func TestWaiterIsWokenByRelease(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New())
	l.SetPollInterval(time.Hour) // only a wake-up can let the waiter in
	lim := limit(t, keycap.Spec{Name: "w", Max: 1, Wait: time.Minute}, "k")
	held := acquire(t, l, lim)
	got := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(context.Background(), lim)
		if err == nil {
			ls.Release()
		}
		got <- err
	}()
	// Let the waiter register and be refused once; releasing before then is
	// fine too (it then finds the slot free).
	runtime.Gosched()
	held.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
}

func TestWaitersAreWokenOneByOne(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New())
	l.SetPollInterval(time.Hour)
	lim := limit(t, keycap.Spec{Name: "w", Max: 1, Wait: time.Minute}, "k")
	held := acquire(t, l, lim)
	const n = 5
	done := make(chan struct{}, n)
	for range n {
		go func() {
			ls, err := l.Acquire(context.Background(), lim)
			if err != nil {
				t.Errorf("waiter: %v", err)
				done <- struct{}{}
				return
			}
			ls.Release() // frees the slot for the next waiter
			done <- struct{}{}
		}()
	}
	held.Release()
	for range n {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was never woken")
		}
	}
}

func TestWaitRunsOut(t *testing.T) {
	t.Parallel()
	l, rec := newLimiter(t, memstore.New())
	l.SetPollInterval(20 * time.Millisecond)
	lim := limit(t, keycap.Spec{Name: "w", Max: 1, Wait: 150 * time.Millisecond}, "k")
	held := acquire(t, l, lim)
	defer held.Release()
	le := refused(t, l, lim, lim)
	if le.Waited < 150*time.Millisecond {
		t.Fatalf("gave up after %s, before the wait of 150ms", le.Waited)
	}
	if e, _ := last(rec, keycap.LimitExceeded); e.Waited != le.Waited {
		t.Fatalf("event waited %s, error %s", e.Waited, le.Waited)
	}
}

func TestWaitIsTheSmallestAmongLimits(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New())
	l.SetPollInterval(10 * time.Millisecond)
	long := limit(t, keycap.Spec{Name: "long", Max: 1, Wait: time.Hour}, "k")
	short := limit(t, keycap.Spec{Name: "short", Max: 5, Wait: 100 * time.Millisecond}, "k")
	none := limit(t, keycap.Spec{Name: "none", Max: 5}, "k")
	held := acquire(t, l, long)
	defer held.Release()
	if le := refused(t, l, long, long, short); le.Waited < 100*time.Millisecond || le.Waited > 30*time.Second {
		t.Fatalf("waited %s, want about 100ms", le.Waited)
	}
	if le := refused(t, l, long, long, none); le.Waited != 0 && le.Waited > 50*time.Millisecond {
		t.Fatalf("waited %s with a limit that allows no wait", le.Waited)
	}
}

func TestCancelEndsWaitAndIsNoStoreFailure(t *testing.T) {
	t.Parallel()
	l, rec := newLimiter(t, memstore.New())
	l.SetPollInterval(time.Hour)
	lim := limit(t, keycap.Spec{Name: "w", Max: 1, Wait: time.Hour}, "k")
	held := acquire(t, l, lim)
	defer held.Release()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx, lim); got <- err }()
	cancel()
	if err := testkit.Recv(t, got, 10*time.Second, "the cancelled Acquire"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire = %v, want context.Canceled", err)
	}
	if rec.Count(keycap.StoreFailed, "") != 0 {
		t.Fatal("a cancelled context was reported as a store failure")
	}
}

func TestCancelDuringStoreCall(t *testing.T) {
	t.Parallel()
	fs := newFaultStore()
	fs.block.Store(true)
	l, rec := newLimiter(t, fs, keycap.WithDefaultFailMode(keycap.FailClosed))
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx, limit(t, keycap.Spec{Name: "c", Max: 1}, "k")); got <- err }()
	testkit.Recv(t, fs.entered, 10*time.Second, "the store call")
	cancel()
	if err := testkit.Recv(t, got, 10*time.Second, "the cancelled Acquire"); !errors.Is(err, context.Canceled) || errors.Is(err, keycap.ErrStoreUnavailable) {
		t.Fatalf("Acquire = %v, want context.Canceled only", err)
	}
	if rec.Count(keycap.StoreFailed, "") != 0 {
		t.Fatal("a cancelled context was reported as a store failure")
	}
}

func TestFailModes(t *testing.T) {
	t.Parallel()
	fs := newFaultStore()
	l, rec := newLimiter(t, fs, keycap.WithRecoverAfter(time.Millisecond)) // default: fail open
	open := limit(t, keycap.Spec{Name: "open", Max: 1}, "k")
	closed := limit(t, keycap.Spec{Name: "closed", Max: 1, FailMode: keycap.FailClosed}, "k")
	fs.fail.Store(true)

	for range 10 {
		ls := acquire(t, l, open)
		if ls.Guarded() {
			t.Fatal("a lease taken while the store was down claims to be guarded")
		}
		ls.Release()
	}
	_, err := l.Acquire(context.Background(), open, closed)
	var se *keycap.StoreError
	if !errors.Is(err, keycap.ErrStoreUnavailable) || !errors.As(err, &se) || !errors.Is(err, errDown) {
		t.Fatalf("fail-closed Acquire = %v, want a *StoreError wrapping the store's error", err)
	}
	if se.Limit.Pool() != closed.Pool() {
		t.Fatalf("StoreError names %s", se.Limit)
	}
	if n := rec.Count(keycap.StoreFailed, ""); n != 1 {
		t.Fatalf("StoreFailed reported %d times in one outage, want 1", n)
	}
	if n := rec.Count(keycap.SlotAcquired, "") + rec.Count(keycap.SlotReleased, ""); n != 0 {
		t.Fatalf("%d slot events for slots never taken", n)
	}

	fs.fail.Store(false)
	// The outage ends once the store has answered without failing for the
	// recover-after time (1 ms here).
	deadline := time.Now().Add(5 * time.Second)
	for rec.Count(keycap.StoreRecovered, "") == 0 && time.Now().Before(deadline) {
		acquire(t, l, closed).Release()
	}
	if n := rec.Count(keycap.StoreRecovered, ""); n != 1 {
		t.Fatalf("StoreRecovered reported %d times, want 1", n)
	}
	fs.fail.Store(true)
	acquire(t, l, open).Release()
	if n := rec.Count(keycap.StoreFailed, ""); n != 2 {
		t.Fatalf("second outage: StoreFailed reported %d times in all, want 2", n)
	}
}

func TestDefaultFailModeClosed(t *testing.T) {
	t.Parallel()
	fs := newFaultStore()
	l, _ := newLimiter(t, fs, keycap.WithDefaultFailMode(keycap.FailClosed))
	fs.fail.Store(true)
	if _, err := l.Acquire(context.Background(), limit(t, keycap.Spec{Name: "d", Max: 1}, "k")); !errors.Is(err, keycap.ErrStoreUnavailable) {
		t.Fatalf("Acquire = %v, want ErrStoreUnavailable", err)
	}
	// A limit's own mode wins over the default.
	acquire(t, l, limit(t, keycap.Spec{Name: "o", Max: 1, FailMode: keycap.FailOpen}, "k")).Release()
}

func TestKeepAliveBatchesRenewals(t *testing.T) {
	t.Parallel()
	fs := newFaultStore()
	fs.batches = make(chan int, 1000)
	l, _ := newLimiter(t, fs)
	const n = 50
	var leases []*keycap.Lease
	for i := range n {
		leases = append(leases, acquire(t, l, limit(t, keycap.Spec{Name: "b", Max: 1, TTL: 600 * time.Millisecond}, string(rune('a'+i)))))
	}
	// Wait for the first renewal round: every lease was renewed, in few calls.
	total, calls := 0, 0
	for total < n {
		select {
		case size := <-fs.batches:
			total += size
			calls++
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d leases renewed", total, n)
		}
	}
	if calls > 5 {
		t.Fatalf("%d leases renewed in %d Renew calls: not batched", n, calls)
	}
	for _, ls := range leases {
		select {
		case <-ls.Lost():
			t.Fatal("lease lost")
		default:
		}
		ls.Release()
	}
}

func TestOneRenewalGoroutinePerLimiter(t *testing.T) {
	l, _ := newLimiter(t, memstore.New())
	acquire(t, l, limit(t, keycap.Spec{Name: "g", Max: 1}, "first")).Release() // starts the loop
	before := runtime.NumGoroutine()
	var leases []*keycap.Lease
	for i := range 1000 {
		leases = append(leases, acquire(t, l, limit(t, keycap.Spec{Name: "g", Max: 1}, string(rune(i)))))
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("goroutines grew from %d to %d with 1000 leases", before, after)
	}
	for _, ls := range leases {
		ls.Release()
	}
}

func TestLeaseLostOnRenewal(t *testing.T) {
	t.Parallel()
	fs := newFaultStore()
	l, rec := newLimiter(t, fs)
	lim := limit(t, keycap.Spec{Name: "lost", Max: 1, TTL: 90 * time.Millisecond}, "k")
	fs.lostPool.Store(lim.Pool())
	ls := acquire(t, l, lim)
	select {
	case <-ls.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost() not closed")
	}
	e, ok := last(rec, keycap.LeaseLost)
	if !ok || e.Limit.Pool() != lim.Pool() {
		t.Fatalf("LeaseLost event %v %+v", ok, e)
	}
	<-ls.Lost() // a second call returns a closed channel too
	ls.Release()
	if a, r := rec.Count(keycap.SlotAcquired, ""), rec.Count(keycap.SlotReleased, ""); a != 1 || r != 1 {
		t.Fatalf("acquired %d, released %d: unbalanced", a, r)
	}
}

func TestLeaseLostWhenRenewalFailsPastTTL(t *testing.T) {
	t.Parallel()
	fs := newFaultStore()
	l, rec := newLimiter(t, fs)
	ls := acquire(t, l, limit(t, keycap.Spec{Name: "lost", Max: 1, TTL: 120 * time.Millisecond}, "k"))
	fs.fail.Store(true)
	select {
	case <-ls.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("lease not marked lost while the store could not renew it")
	}
	if rec.Count(keycap.StoreFailed, "") != 1 {
		t.Fatalf("StoreFailed reported %d times", rec.Count(keycap.StoreFailed, ""))
	}
	fs.fail.Store(false)
	ls.Release()
}

func TestReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	l, rec := newLimiter(t, memstore.New())
	lim := limit(t, keycap.Spec{Name: "r", Max: 1}, "k")
	ls := acquire(t, l, lim)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(ls.Release)
	}
	wg.Wait()
	if n := rec.Count(keycap.SlotReleased, ""); n != 1 {
		t.Fatalf("SlotReleased reported %d times", n)
	}
	if e, _ := last(rec, keycap.SlotReleased); e.Held <= 0 || e.Limit.Key() != "k" {
		t.Fatalf("SlotReleased event %+v", e)
	}
	acquire(t, l, lim).Release()
}

func TestDoReleasesOnPanic(t *testing.T) {
	t.Parallel()
	l, rec := newLimiter(t, memstore.New())
	lim := limit(t, keycap.Spec{Name: "p", Max: 1}, "k")
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_ = l.Do(context.Background(), func(context.Context) error { panic("boom") }, lim)
	}()
	if a, r := rec.Count(keycap.SlotAcquired, ""), rec.Count(keycap.SlotReleased, ""); a != 1 || r != 1 {
		t.Fatalf("acquired %d, released %d after a panic", a, r)
	}
	want := errors.New("fn failed")
	if err := l.Do(context.Background(), func(context.Context) error { return want }, lim); err != want {
		t.Fatalf("Do = %v, want fn's error", err)
	}
}

func TestObserverPanicKeepsEventsBalanced(t *testing.T) {
	t.Parallel()
	rec := &keycaptest.Recorder{}
	var seen atomic.Int64 // panicky's acquired minus released
	panicky := keycap.ObserverFunc(func(e keycap.Event) {
		switch e.Kind {
		case keycap.SlotAcquired:
			seen.Add(1)
			if e.Limit.Name() == "b" {
				panic("observer")
			}
		case keycap.SlotReleased:
			seen.Add(-1)
		}
	})
	l, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(keycap.Observers(rec, panicky)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, b := limit(t, keycap.Spec{Name: "a", Max: 1}, "k"), limit(t, keycap.Spec{Name: "b", Max: 1}, "k")
	func() {
		defer func() {
			if r := recover(); r != "observer" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_, _ = l.Acquire(context.Background(), a, b)
	}()
	// Both slots were reported acquired — b's SlotAcquired reached rec and
	// then panicked in panicky — so both are reported released, to every
	// observer, and both slots are free again.
	if acq, rel := rec.Count(keycap.SlotAcquired, ""), rec.Count(keycap.SlotReleased, ""); acq != 2 || rel != 2 {
		t.Fatalf("acquired %d, released %d: unbalanced", acq, rel)
	}
	if n := seen.Load(); n != 0 {
		t.Fatalf("the panicking observer saw %d more acquired than released", n)
	}
	acquire(t, l, a).Release()
	l2, _ := newLimiter(t, frontdoor.Store(l))
	acquire(t, l2, b).Release()
}

// TestObserverPanicOnAStoreEventFreesTheSlots: an observer that panics on
// a store event that an Acquire's answer sends (StoreRecovered on its first
// limit's, StoreFailed on its second's) must not leave the slots that
// Acquire took held (it never returns their lease).
func TestObserverPanicOnAStoreEventFreesTheSlots(t *testing.T) {
	t.Parallel()
	for _, on := range []keycap.EventKind{keycap.StoreRecovered, keycap.StoreFailed} {
		t.Run(on.String(), func(t *testing.T) {
			t.Parallel()
			f := newFaultStore()
			var armed atomic.Bool
			var seen atomic.Int64
			obs := keycap.ObserverFunc(func(e keycap.Event) {
				if e.Kind == on && armed.Load() {
					seen.Add(1)
					panic("observer")
				}
			})
			l, err := keycap.NewLimiter(f, keycap.WithObserver(obs), keycap.WithRecoverAfter(time.Millisecond), keycap.WithDefaultFailMode(keycap.FailClosed))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			a, b := limit(t, keycap.Spec{Name: "event-a", Max: 1}, "k"), limit(t, keycap.Spec{Name: "event-b", Max: 1}, "k")
			if on == keycap.StoreRecovered {
				// An outage to recover from: its answer is a's.
				f.fail.Store(true)
				if _, err := l.Acquire(context.Background(), a, b); err == nil {
					t.Fatal("Acquire on a failing store with FailClosed succeeded")
				}
				f.fail.Store(false)
				time.Sleep(2 * time.Millisecond) // past WithRecoverAfter: the next answer ends the outage
			} else {
				f.failPool.Store(b.Pool()) // a is granted, then b fails
			}
			armed.Store(true)
			var got any
			func() {
				defer func() { got = recover() }()
				if ls, err := l.Acquire(context.Background(), a, b); err == nil {
					ls.Release()
				}
			}()
			if got != "observer" || seen.Load() != 1 {
				t.Fatalf("recovered %v after %d %s events, want the observer's panic on one", got, seen.Load(), on)
			}
			f.failPool.Store(store.PoolID{})
			other, _ := newLimiter(t, f.Store)
			acquire(t, other, a, b).Release()
		})
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	l, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	ls := acquire(t, l, limit(t, keycap.Spec{Name: "c", Max: 1}, "k"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	ls.Release() // still works
	if _, err := l.Acquire(context.Background(), limit(t, keycap.Spec{Name: "c", Max: 1}, "k")); !errors.Is(err, keycap.ErrClosed) {
		t.Fatalf("Acquire after Close = %v", err)
	}
}

func TestPoolIDs(t *testing.T) {
	t.Parallel()
	if store.PoolOf(0, "ab", "c") == store.PoolOf(0, "a", "bc") {
		t.Fatal("name/key boundary is ambiguous")
	}
	if store.PoolOf(0, "a", "k") != (keycap.Spec{Name: "a", Max: 1}).For("k").Pool() {
		t.Fatal("limit pool differs from store.PoolOf")
	}
	// Families keep front doors apart: an application limit named like
	// another front door's pools never reaches them.
	if store.PoolOf(byte(keycap.FamilyApp), "conncap:chat", "user:1") == store.PoolOf(byte(keycap.FamilyConn), "chat", "user:1") ||
		store.PoolOf(byte(keycap.FamilyApp), "x", "k") == store.PoolOf(byte(keycap.FamilyJob), "x", "k") {
		t.Fatal("two families share a pool")
	}
	if a, b := store.NewOwner(), store.NewOwner(); a == b {
		t.Fatal("two owner tokens are equal")
	}
}

func TestPoolIDLongAndShortPathsAgree(t *testing.T) {
	t.Parallel()
	// Keys on both sides of the stack buffer's size hash as one function.
	for _, n := range []int{0, 1, 200, 245, 246, 247, 248, 300, 5000} {
		key := strings.Repeat("k", n)
		h := sha256.New()
		h.Write([]byte{byte(keycap.FamilyApp), byte(len("name"))})
		h.Write([]byte("name" + key))
		var want store.PoolID
		tag := store.TagOf(byte(keycap.FamilyApp), "name")
		copy(want[:4], tag[:])
		copy(want[4:], h.Sum(nil))
		if got := store.PoolOf(0, "name", key); got != want {
			t.Fatalf("key of %d bytes: %s, want %s", n, got, want)
		}
	}
}

// TestEventsCarryTheFamily: every event of a lease — acquired, refused,
// released — names the family of its limit, whichever path sends it.
func TestEventsCarryTheFamily(t *testing.T) {
	t.Parallel()
	rec := &keycaptest.Recorder{}
	l, _ := newLimiter(t, memstore.New(), keycap.WithObserver(rec))
	lim := limit(t, keycap.Spec{Name: "export", Max: 1, Family: keycap.FamilyJob}, "k")
	ls, err := l.Acquire(context.Background(), lim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(context.Background(), lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("second acquire: %v", err)
	}
	ls.Release()
	events := rec.Events()
	if len(events) != 3 {
		t.Fatalf("%d events, want 3: %+v", len(events), events)
	}
	for _, e := range events {
		if e.Family != keycap.FamilyJob {
			t.Errorf("%v reported as family %v", e.Kind, e.Family)
		}
	}
}
