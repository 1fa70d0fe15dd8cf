package keycap_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// lineStore is a memstore that says when a caller first queued (was
// refused with a ticket), and whose acquires with a ticket can fail.
type lineStore struct {
	*memstore.Store
	queued chan store.Owner // each owner's first refused queued Acquire, if not nil
	fail   atomic.Bool
	mu     sync.Mutex
	seen   map[store.Owner]bool
}

var errLineDown = errors.New("line store down")

func (s *lineStore) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	if d.Line.TTL == 0 {
		return s.Store.Acquire(ctx, pool, owner, d)
	}
	if s.fail.Load() {
		return store.Grant{}, errLineDown
	}
	g, err := s.Store.Acquire(ctx, pool, owner, d)
	if !g.Granted && s.queued != nil {
		s.mu.Lock()
		first := !s.seen[owner]
		if s.seen == nil {
			s.seen = make(map[store.Owner]bool)
		}
		s.seen[owner] = true
		s.mu.Unlock()
		if first {
			select {
			case s.queued <- owner:
			default:
			}
		}
	}
	return g, err
}

func newLineLimiter(t *testing.T, s keycap.Store, opts ...keycap.Option) *keycap.Limiter {
	t.Helper()
	l, err := keycap.NewLimiter(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Waiters are served in the order they came, each as soon as the slot
// before it is released, without polling.
func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	s := &lineStore{Store: memstore.New(), queued: make(chan store.Owner, 16)}
	l := newLineLimiter(t, s)
	lim := keycap.Spec{Name: "line", Max: 1, Wait: 10 * time.Second}.For("k")
	holder, err := l.Acquire(context.Background(), lim)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var mu sync.Mutex
	var order []int
	var g testkit.Group
	for i := range n {
		g.Add(1)
		go func() {
			defer g.Done()
			ls, err := l.Acquire(context.Background(), lim)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			ls.Release()
		}()
		testkit.Recv(t, s.queued, 5*time.Second, fmt.Sprintf("waiter %d to queue", i))
	}
	start := time.Now()
	holder.Release()
	g.Wait(t, 10*time.Second, "the waiters")
	if el := time.Since(start); el > keycap.LinePoll/2 {
		t.Errorf("%d handoffs took %s: waiters were not woken by the releases", n, el)
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("served in order %v, want arrival order", order)
		}
	}
}

// A fresh Acquire that may not wait is refused while a waiter is in line,
// even in the instant the slot is free.
func TestFreshCallersDoNotOvertakeTheLine(t *testing.T) {
	s := &lineStore{Store: memstore.New(), queued: make(chan store.Owner, 1)}
	l := newLineLimiter(t, s)
	waiting := keycap.Spec{Name: "overtake", Max: 1, Wait: 10 * time.Second}.For("k")
	now := keycap.Spec{Name: "overtake", Max: 1}.For("k")
	holder, err := l.Acquire(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	checked := testkit.NewGate()
	defer checked.Open()
	go func() {
		ls, err := l.Acquire(context.Background(), waiting)
		if err == nil {
			// Held until the fresh caller below has tried: released
			// sooner, the slot would be free for it, rightly.
			checked.Wait(10 * time.Second)
			ls.Release()
		}
		got <- err
	}()
	testkit.Recv(t, s.queued, 5*time.Second, "the waiter to queue")
	holder.Release()
	// The slot is the waiter's: handed to its ticket, or already claimed.
	if _, err := l.Acquire(context.Background(), now); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("a fresh caller overtook the line: %v", err)
	}
	checked.Open()
	if err := testkit.Recv(t, got, 5*time.Second, "the waiter"); err != nil {
		t.Fatal(err)
	}
}

// A waiter that gives up (its wait runs out, its context ends) leaves the
// line: the next waiter is served at once, and the event says how long it
// waited.
func TestGivingUpLeavesTheLine(t *testing.T) {
	s := &lineStore{Store: memstore.New(), queued: make(chan store.Owner, 4)}
	rec := &keycaptest.Recorder{}
	l := newLineLimiter(t, s, keycap.WithObserver(rec))
	short := keycap.Spec{Name: "leave", Max: 1, Wait: 200 * time.Millisecond}.For("k")
	long := keycap.Spec{Name: "leave", Max: 1, Wait: 10 * time.Second}.For("k")
	holder, err := l.Acquire(context.Background(), long)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { _, err := l.Acquire(context.Background(), short); ran <- err }()
	testkit.Recv(t, s.queued, 5*time.Second, "the short waiter to queue")
	cctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() { _, err := l.Acquire(cctx, long); cancelled <- err }()
	testkit.Recv(t, s.queued, 5*time.Second, "the cancelled waiter to queue")
	served := make(chan *keycap.Lease, 1)
	go func() {
		ls, err := l.Acquire(context.Background(), long)
		if err != nil {
			t.Error(err)
		}
		served <- ls
	}()
	testkit.Recv(t, s.queued, 5*time.Second, "the last waiter to queue")

	var le *keycap.LimitError
	if err := testkit.Recv(t, ran, 5*time.Second, "the short wait to run out"); !errors.As(err, &le) || le.Waited < 200*time.Millisecond {
		t.Fatalf("short wait: %v, want a LimitError after 200ms", err)
	}
	cancel()
	if err := testkit.Recv(t, cancelled, 5*time.Second, "the cancelled waiter"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	start := time.Now()
	holder.Release()
	ls := testkit.Recv(t, served, 5*time.Second, "the last waiter")
	if ls == nil {
		return
	}
	defer ls.Release()
	// Served by the handoff, not after the claim windows of the two that
	// left ran out.
	if el := time.Since(start); el > keycap.HandoffClaim/2 {
		t.Errorf("the last waiter was served %s after the release", el)
	}
	var exceeded []keycap.Event
	for _, e := range rec.Events() {
		if e.Kind == keycap.LimitExceeded {
			exceeded = append(exceeded, e)
		}
	}
	if len(exceeded) != 1 || exceeded[0].Waited < 200*time.Millisecond {
		t.Errorf("LimitExceeded events %+v, want one with the time waited", exceeded)
	}
}

// Callers that wait for the same two limits, named in either order, never
// deadlock: slots are taken in pool order.
func TestSeveralLinesDoNotDeadlock(t *testing.T) {
	l := newLineLimiter(t, memstore.New())
	a := keycap.Spec{Name: "a", Max: 1, Wait: 20 * time.Second}.For("k")
	b := keycap.Spec{Name: "b", Max: 1, Wait: 20 * time.Second}.For("k")
	var both atomic.Int32
	var g testkit.Group
	for i := range 8 {
		g.Add(1)
		go func() {
			defer g.Done()
			limits := []keycap.Limit{a, b}
			if i%2 == 1 {
				limits = []keycap.Limit{b, a}
			}
			for range 20 {
				ls, err := l.Acquire(context.Background(), limits...)
				if err != nil {
					t.Error(err)
					return
				}
				if both.Add(1) > 1 {
					t.Error("two holders of max-1 limits at once")
				}
				both.Add(-1)
				ls.Release()
			}
		}()
	}
	g.Wait(t, 30*time.Second, "the waiters (a deadlock?)")
}

// A store that fails while a caller waits applies the limit's fail mode at
// once: fail-closed refuses with a StoreError, fail-open admits unguarded.
func TestLineFailModes(t *testing.T) {
	for _, mode := range []keycap.FailMode{keycap.FailClosed, keycap.FailOpen} {
		t.Run(mode.String(), func(t *testing.T) {
			s := &lineStore{Store: memstore.New(), queued: make(chan store.Owner, 1)}
			l := newLineLimiter(t, s)
			lim := keycap.Spec{Name: "fail", Max: 1, Wait: 30 * time.Second, FailMode: mode}.For("k")
			holder, err := l.Acquire(context.Background(), keycap.Spec{Name: "fail", Max: 1}.For("k"))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Release()
			got := make(chan error, 1)
			go func() {
				ls, err := l.Acquire(context.Background(), lim)
				if err == nil {
					if ls.Guarded() {
						err = errors.New("admitted guarded while the store was down")
					}
					ls.Release()
				}
				got <- err
			}()
			testkit.Recv(t, s.queued, 5*time.Second, "the waiter to queue")
			s.fail.Store(true)
			err = testkit.Recv(t, got, 3*keycap.LinePoll, "the waiter to see the store fail")
			switch mode {
			case keycap.FailClosed:
				if !errors.Is(err, keycap.ErrStoreUnavailable) {
					t.Fatalf("fail-closed waiter: %v, want ErrStoreUnavailable", err)
				}
			default:
				if err != nil {
					t.Fatalf("fail-open waiter: %v", err)
				}
			}
		})
	}
}

// BenchmarkHandoffInProcess: a release → the waiter (another goroutine of
// the same process) holds the slot, on memstore.
func BenchmarkHandoffInProcess(b *testing.B) {
	s := &lineStore{Store: memstore.New(), queued: make(chan store.Owner, 1)}
	l, err := keycap.NewLimiter(s)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	lim := keycap.Spec{Name: "handoff", Max: 1, Wait: time.Minute}.For("k")
	rounds := max(b.N, 1000)
	got := make(chan time.Time)
	next := make(chan struct{})
	go func() {
		for range next {
			ls, err := l.Acquire(context.Background(), lim)
			if err != nil {
				b.Error(err)
				got <- time.Time{}
				continue
			}
			got <- time.Now()
			ls.Release()
		}
	}()
	defer close(next)
	lat := make([]time.Duration, 0, rounds)
	for range rounds {
		ls, err := l.Acquire(context.Background(), lim)
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-s.queued: // this goroutine's own, if it waited for the slot
		default:
		}
		next <- struct{}{}
		testkit.Recv(b, s.queued, 5*time.Second, "the waiter to queue")
		t0 := time.Now()
		ls.Release()
		lat = append(lat, testkit.Recv(b, got, 5*time.Second, "the waiter").Sub(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(0, "ns/op")
}

// A caller that parks keeps its place: when the slot frees, its Wake is
// called, and its next attempt (same owner) claims the slot, which nobody
// else can take meanwhile.
func TestParkedCallerIsWokenAndClaims(t *testing.T) {
	rec := &keycaptest.Recorder{}
	l := newLineLimiter(t, memstore.New(), keycap.WithObserver(rec))
	lim := keycap.Spec{Name: "park", Max: 1}.For("k")
	holder, err := l.Acquire(context.Background(), lim)
	if err != nil {
		t.Fatal(err)
	}
	woken := make(chan struct{}, 2)
	p := frontdoor.Parking{Owner: frontdoor.OwnerFor("job 1"), For: time.Minute, Claim: time.Minute, Wake: func() { woken <- struct{}{} }}
	_, err = frontdoor.AcquireOrPark(context.Background(), l, p, lim)
	var le *keycap.LimitError
	if !errors.As(err, &le) || !le.Parked {
		t.Fatalf("AcquireOrPark on a full pool: %v, want a parked LimitError", err)
	}
	select {
	case <-woken:
		t.Fatal("woken before any slot freed")
	default:
	}
	holder.Release()
	testkit.Recv(t, woken, 5*time.Second, "the parked caller's wake-up")
	if _, err := l.Acquire(context.Background(), lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("a fresh caller took the slot handed to the parked one: %v", err)
	}
	ls, err := frontdoor.AcquireOrPark(context.Background(), l, p, lim)
	if err != nil {
		t.Fatalf("the parked caller's next attempt: %v", err)
	}
	ls.Release()
	select {
	case <-woken:
		t.Fatal("woken twice")
	default:
	}
	if n := rec.Count(keycap.LimitExceeded, "park"); n != 2 {
		t.Errorf("%d LimitExceeded events, want 2 (the fresh caller and the parking)", n)
	}
}

// A parked caller that never comes back does not hold the line: its ticket
// expires after For, an unclaimed slot after Claim.
func TestParkedTicketExpires(t *testing.T) {
	l := newLineLimiter(t, memstore.New())
	lim := keycap.Spec{Name: "park-expiry", Max: 1}.For("k")
	holder, err := l.Acquire(context.Background(), lim)
	if err != nil {
		t.Fatal(err)
	}
	woken := make(chan struct{}, 1)
	p := frontdoor.Parking{Owner: frontdoor.OwnerFor("job 2"), For: 300 * time.Millisecond, Claim: 300 * time.Millisecond, Wake: func() { woken <- struct{}{} }}
	if _, err := frontdoor.AcquireOrPark(context.Background(), l, p, lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatal(err)
	}
	holder.Release() // handed to the parked ticket, which never claims it
	testkit.Recv(t, woken, 5*time.Second, "the wake-up")
	deadline := time.Now().Add(5 * time.Second)
	for {
		ls, err := l.Acquire(context.Background(), lim)
		if err == nil {
			ls.Release()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the unclaimed slot never passed on")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countingLineStore counts the Acquire calls that carry a ticket, and says
// when one is refused.
type countingLineStore struct {
	*memstore.Store
	ticketed atomic.Int64
	refused  chan struct{}
}

func (s *countingLineStore) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	if d.Line.TTL > 0 {
		s.ticketed.Add(1)
	}
	g, err := s.Store.Acquire(ctx, pool, owner, d)
	if d.Line.TTL > 0 && err == nil && !g.Granted {
		select {
		case s.refused <- struct{}{}:
		default:
		}
	}
	return g, err
}

// A slot handed to a waiter is its lease: it is admitted when the store's
// notification names it, without claiming the slot by another call, and
// the lease is the store's for its whole TTL (renewed past it, the holder's
// alone until released).
func TestHandoffIsTheGrant(t *testing.T) {
	for _, parent := range []bool{false, true} {
		t.Run(fmt.Sprintf("parent=%v", parent), func(t *testing.T) {
			s := &countingLineStore{Store: memstore.New(), refused: make(chan struct{}, 4)}
			l := newLineLimiter(t, s)
			// A TTL long enough that a loaded machine wakes the waiter
			// within a third of it (past that, the handoff is claimed).
			sp := keycap.Spec{Name: "handoff", Max: 1, Wait: 10 * time.Second, TTL: 1500 * time.Millisecond}
			if parent {
				sp.Parent = keycap.MustParent("handoff-parent", 1)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			holder, err := l.Acquire(ctx, sp.For("a"))
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				ls  *keycap.Lease
				err error
			}
			got := make(chan result, 1)
			wkey, okey := "a", "a" // one pool
			if parent {
				wkey, okey = "b", "c" // keys of one parent
			}
			go func() {
				ls, err := l.Acquire(ctx, sp.For(wkey))
				got <- result{ls, err}
			}()
			// Its lone first try, then the one after it subscribed to the
			// line's notifications.
			for range 2 {
				select {
				case <-s.refused:
				case <-ctx.Done():
					t.Fatal("the waiter never queued")
				}
			}
			asked := s.ticketed.Load()
			holder.Release()
			var r result
			select {
			case r = <-got:
			case <-ctx.Done():
				t.Fatal("the waiter was not served")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.ls.Release()
			if n := s.ticketed.Load() - asked; n != 0 {
				t.Errorf("the waiter asked the store %d more times after the handoff, want 0: the handoff is the grant", n)
			}
			// Held for longer than its TTL: renewed by the keeper like any
			// lease, and nobody else's meanwhile.
			other := sp
			other.Wait = 0
			deadline := time.Now().Add(sp.TTL + sp.TTL/3)
			for time.Now().Before(deadline) {
				if ls, err := l.Acquire(ctx, other.For(okey)); err == nil {
					ls.Release()
					t.Fatal("another caller took the slot handed to the waiter")
				}
				select {
				case <-r.ls.Lost():
					t.Fatal("the handed lease was lost")
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
}

// A handoff announced when a third of the TTL has passed since the waiter's
// last call is claimed by a call, not trusted: the store's lease lives a
// TTL from the handoff, which the waiter can only bound from its last call.
func TestLateHandoffIsClaimed(t *testing.T) {
	s := &countingLineStore{Store: memstore.New(), refused: make(chan struct{}, 4)}
	l := newLineLimiter(t, s)
	sp := keycap.Spec{Name: "late-handoff", Max: 1, Wait: 10 * time.Second, TTL: 60 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, err := l.Acquire(ctx, sp.For("a"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(ctx, sp.For("a"))
		if err == nil {
			ls.Release()
		}
		got <- err
	}()
	for range 2 {
		select {
		case <-s.refused:
		case <-ctx.Done():
			t.Fatal("the waiter never queued")
		}
	}
	asked := s.ticketed.Load()
	time.Sleep(sp.TTL) // past a third of the TTL since the waiter's last call (its next poll is in a second)
	holder.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter was not served")
	}
	if n := s.ticketed.Load() - asked; n < 1 {
		t.Errorf("the waiter was admitted on a late handoff without claiming it (%d calls)", n)
	}
}
