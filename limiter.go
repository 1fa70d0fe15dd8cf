package keycap

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap/internal/coarse"
)

// BudgetError is a store call that did not answer within its decision
// budget. The Limiter counts it as a store failure: it is reported as one,
// the limit's fail mode applies, and a fail-closed limit's *StoreError wraps
// it.
type BudgetError struct {
	Budget time.Duration
	Err    error // what the store returned when its deadline passed
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("keycap: the store did not answer within the decision budget of %s: %v", e.Budget, e.Err)
}

// Unwrap returns the store's error.
func (e *BudgetError) Unwrap() error { return e.Err }

// Limiter hands out leases on the pools of one Store. It is safe for
// concurrent use; make one per process and share it.
//
// A Limiter keeps its held leases alive with one renewal loop, started with
// the first lease and stopped by Close.
type Limiter struct {
	store    Store
	observer Observer
	failMode FailMode
	budget   time.Duration
	blocks   bool          // the store's calls may wait: they get the budget as a deadline
	parts    Partitioner   // nil: the store is one partition
	base     time.Time     // origin of the monotonic clock (now), as a wall time
	origin   time.Duration // ... on the coarse clock
	poll     func() time.Duration

	outages  outages
	closed   atomic.Bool
	free     sync.Pool // released leases kept for reuse (Lease.reuse)
	keeper   keeper
	releaser releaser
	waiters  waiters
	nodeName string
	node     NodeID
	nodes    nodes
	liner    Liner    // nil: the store keeps no line
	sharer   Sharer   // nil: the store keeps no weights or parents
	notifier Notifier // nil: waiters in a line poll
	pinner   Pinner   // nil: Do's slots expire and are renewed like any
	lines    lines
	parked   parked

	shadowAll bool      // WithShadowMode
	inspect   *ledger   // WithInspection; nil: none
	ov        *override // WithOverrides; nil: none
	nodeTag   Tag       // stamped in the owners of the Limiter's leases
	wallBase  int64     // base in Unix milliseconds, for owner stamps
	ownerSeq  atomic.Uint64
}

// An Option configures a Limiter.
type Option struct{ apply func(*Limiter) }

// WithObserver sends the Limiter's events to o. Combine several with
// Observers.
func WithObserver(o Observer) Option { return Option{func(l *Limiter) { l.observer = o }} }

// WithDefaultFailMode sets the fail mode of limits that have none
// (FailDefault). The default is FailOpen: keycap is a fairness tool, and a
// store outage should not take the service down with it.
func WithDefaultFailMode(m FailMode) Option { return Option{func(l *Limiter) { l.failMode = m }} }

// WithDecisionBudget sets how long any store call may take before the store
// counts as failed for it (default DefaultBudget): a store that is slow, hung
// or failing over costs a caller at most this, then the limit's fail mode
// applies, and the outage is reported. A limit may set its own (WithBudget).
// Stores that never block (memstore) are not bounded: they need no deadline.
//
// The budget works through the context given to the store: redisstore needs
// a client with ContextTimeoutEnabled (it checks), pgstore always honours it.
func WithDecisionBudget(d time.Duration) Option { return Option{func(l *Limiter) { l.budget = d }} }

// WithRecoverAfter sets how long a partition of the store must answer
// without a failure before its outage is reported over (default
// DefaultRecoverAfter). At least 1 ms.
func WithRecoverAfter(d time.Duration) Option {
	return Option{func(l *Limiter) { l.outages.quiet = d }}
}

// NewLimiter returns a Limiter over store. A nil store is an error.
func NewLimiter(store Store, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("keycap: NewLimiter: store is nil")
	}
	l := &Limiter{store: store, failMode: FailOpen, budget: DefaultBudget, base: time.Now(), origin: coarse.Now(), poll: pollInterval}
	l.outages.quiet = DefaultRecoverAfter
	for _, o := range opts {
		if o.apply != nil {
			o.apply(l)
		}
	}
	switch l.failMode {
	case FailOpen, FailClosed:
	default:
		return nil, &InvalidLimitError{Field: "default fail mode", Value: l.failMode.String(), Reason: "must be FailOpen or FailClosed"}
	}
	if l.budget <= 0 {
		return nil, &InvalidLimitError{Field: "decision budget", Value: l.budget.String(), Reason: "must be positive"}
	}
	if l.outages.quiet < time.Millisecond {
		return nil, &InvalidLimitError{Field: "recover after", Value: l.outages.quiet.String(), Reason: "must be at least 1ms"}
	}
	_, nonBlocking := store.(NonBlocking)
	l.blocks = !nonBlocking
	l.parts, _ = store.(Partitioner)
	if err := l.nodes.init(l); err != nil {
		return nil, err
	}
	l.initOwners()
	l.keeper.init(l)
	l.releaser.init(l)
	l.waiters.init()
	l.liner, _ = store.(Liner)
	l.sharer, _ = store.(Sharer)
	l.pinner, _ = store.(Pinner)
	if l.liner != nil {
		l.notifier, _ = store.(Notifier)
	}
	l.lines.init(l)
	l.parked.init(l)
	if l.ov != nil {
		if err := l.ov.init(l); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Store returns the store the Limiter hands out leases from.
func (l *Limiter) Store() Store { return l.store }

// Close stops the renewal loop. Leases still held stay valid until their TTL
// runs out and can still be released; each one's Lost channel is closed when
// its TTL runs out, since nothing renews it any more. Acquire returns
// ErrClosed. Close is idempotent.
func (l *Limiter) Close() error {
	if l.closed.CompareAndSwap(false, true) {
		l.nodes.close()
		l.keeper.close()
		l.releaser.close()
		l.parked.close()
		l.lines.close()
		if l.ov != nil {
			l.ov.close()
		}
	}
	return nil
}

// now reads the monotonic clock: the process's coarse clock (two atomic
// loads, at most about a millisecond behind), which times renewals and
// deadlines early rather than late.
func (l *Limiter) now() time.Duration { return coarse.Now() - l.origin }

// precise reads the precise clock on now's scale, for the durations events
// report: a duration from a now to a precise is never short, and at most
// about a millisecond long.
func (l *Limiter) precise() time.Duration { return coarse.Precise() - l.origin }

// Acquire takes one slot of every limit, or none: when a limit refuses, the
// slots already taken are released before Acquire returns. The lease it
// returns must be released (Lease.Release), typically with defer.
//
// Errors:
//   - errors.Is(err, ErrLimitExceeded): a limit had no free slot, in time;
//     errors.As gives the *LimitError that names it. A limit of max 0 refuses
//     at once, without a store call.
//   - errors.Is(err, ErrStoreUnavailable): the store failed for a limit that
//     fails closed (*StoreError). A limit that fails open is skipped instead:
//     the lease holds no slot for it.
//   - the context's error, when ctx ends first. It is never reported as a
//     store failure.
//   - errors.Is(err, ErrInvalidLimit): a zero Limit, or two limits on the
//     same pool.
//   - ErrClosed after Close.
//
// Waiting: Acquire waits for a slot only when every limit allows a wait
// (WithWait), for the smallest of those waits. On a store that keeps wait
// lines (a Liner: memstore, redisstore, pgstore), a refused waiter takes a
// ticket in the pool's line in the same call, and a slot that frees on any
// client is handed to the oldest ticket: waiters are served in arrival
// order, fresh callers do not overtake them, and the store's notification
// wakes the waiter at once (LinePoll is the fallback). With several limits,
// the slots are taken in the order of their pools, each held while the
// caller waits in the next one's line, so that waiters never deadlock. On
// other stores a waiter is woken by a release through this Limiter, and
// otherwise polls every 100 ms ± 50 %. Acquire with no limits returns an
// empty lease.
func (l *Limiter) Acquire(ctx context.Context, limits ...Limit) (*Lease, error) {
	return l.acquire(ctx, nil, nil, limits, false)
}

// acquire is Acquire, AcquireAs when member is not nil, or AcquireOrPark
// when park is not nil. With reuse, the lease may be one that Lease.reuse
// kept (Do).
func (l *Limiter) acquire(ctx context.Context, member *string, park *Parking, limits []Limit, reuse bool) (*Lease, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	wait, err := check(limits)
	if err != nil {
		return nil, err
	}
	if l.ov != nil {
		limits = l.ov.apply(limits)
	}
	if l.hasShadow(limits) {
		return l.acquireShadowed(ctx, member, park, limits)
	}
	if err := l.checkShared(limits, member != nil); err != nil {
		return nil, err
	}
	if member != nil {
		if err := l.nodes.check(limits); err != nil {
			return nil, err
		}
	}
	for i := range limits {
		if limits[i].max == 0 {
			l.refused(ctx, limits[i], 0)
			return nil, &LimitError{Limit: limits[i]}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	start := l.now()
	ls := newLease(l, limits, start, reuse)
	if len(limits) == 0 { // nothing to take (every limit a shadow): whatever the path
		l.admit(ctx, ls, 0)
		return ls, nil
	}
	if l.inspect != nil {
		if label, ok := ctx.Value(labelKey{}).(string); ok {
			ls.more().label = label
		}
	}
	switch {
	case member != nil:
		return l.acquireMember(ctx, ls, *member, wait, start)
	case park != nil:
		ls.owner = park.Owner
		if l.liner != nil && l.notifier != nil {
			l.parked.cancel(park.Owner) // an attempt that comes back
			return l.waitInLine(ctx, ls, wait, start, park)
		}
	}
	return l.acquireLease(ctx, ls, wait, start)
}

// acquireMember takes ls as the node's member named member.
func (l *Limiter) acquireMember(ctx context.Context, ls *Lease, member string, wait, start time.Duration) (*Lease, error) {
	ls.owner, ls.member = NodeOwner(l.node, member), true
	// Registered before the store grants it, so that a heartbeat meanwhile
	// keeps it rather than dropping it as a ghost.
	l.nodes.add(ls)
	defer func() {
		if !ls.admitted {
			l.nodes.remove(ls)
		}
	}()
	return l.acquireLease(ctx, ls, wait, start)
}

// acquireLease takes ls's slots: one try when its limits may not wait, with
// no defer (the common path: a request or a job that is refused at once),
// or waitFor.
func (l *Limiter) acquireLease(ctx context.Context, ls *Lease, wait, start time.Duration) (*Lease, error) {
	if wait > 0 {
		if l.liner != nil {
			return l.waitInLine(ctx, ls, wait, start, nil)
		}
		return l.waitFor(ctx, ls, wait, start)
	}
	refused, err := l.try(ctx, ls, start)
	if err != nil {
		return nil, err
	}
	if refused != nil {
		l.refused(ctx, *refused, 0)
		return nil, &LimitError{Limit: *refused}
	}
	ls.plain = len(ls.slots) == 1
	l.admit(ctx, ls, 0)
	return ls, nil
}

// waitFor takes ls's slots, waiting up to wait for a full pool to free a
// slot: woken by a local release, or polling for one elsewhere.
func (l *Limiter) waitFor(ctx context.Context, ls *Lease, wait, start time.Duration) (*Lease, error) {
	// Registered before the first try, so that a release between a refusal
	// and the sleep is not missed.
	w := l.waiters.add(ls)
	defer l.waiters.remove(w)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	now := start
	for {
		refused, err := l.try(ctx, ls, now)
		if err != nil {
			return nil, err
		}
		if refused == nil {
			l.admit(ctx, ls, now-start)
			return ls, nil
		}
		waited := l.precise() - start
		if waited >= wait {
			l.refused(ctx, *refused, waited)
			return nil, &LimitError{Limit: *refused, Waited: waited}
		}
		d := min(l.poll(), wait-waited)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.ch:
		case <-timer.C:
		}
		now = l.now()
	}
}

// pollInterval is 100 ms ± 50 %: the randomness keeps waiters from polling
// in step.
func pollInterval() time.Duration {
	return 50*time.Millisecond + rand.N(100*time.Millisecond)
}

// check validates a set of limits for one Acquire and returns its wait.
func check(limits []Limit) (time.Duration, error) {
	wait := time.Duration(-1)
	for i := range limits {
		lim := &limits[i] // a Limit is 104 bytes: not copied per check
		if !lim.valid() {
			return 0, fmt.Errorf("%w: limit %d of %d is the zero Limit (build limits with NewLimit)", ErrInvalidLimit, i+1, len(limits))
		}
		for j := range i {
			if limits[j].pool == lim.pool {
				return 0, fmt.Errorf("%w: two limits on pool %q with key %q in one Acquire", ErrInvalidLimit, lim.name, lim.key)
			}
		}
		if wait < 0 || lim.wait < wait {
			wait = lim.wait
		}
	}
	return max(wait, 0), nil
}

// try attempts every slot of ls once, starting at now. It returns the limit
// that refused, or nil when every slot is held or skipped by a failing-open
// store. On refusal and on error, the slots taken are released.
func (l *Limiter) try(ctx context.Context, ls *Lease, now time.Duration) (*Limit, error) {
	if l.observer != nil {
		// An observer that panics on a store event (StoreRecovered,
		// StoreFailed), or a store that panics, must not leave the slots
		// taken so far held: ls is not admitted, so nobody would release or
		// renew them.
		defer func() {
			if r := recover(); r != nil {
				l.undo(ls)
				panic(r)
			}
		}()
	}
	for i := range ls.slots {
		s := &ls.slots[i]
		bctx, cancel := l.bound(ctx, l.budgetOf(s.limit))
		ok, err := l.acquireIn(bctx, &s.limit, ls.owner)
		outOfBudget := bctx.Err() != nil // read before cancel, which ends bctx too
		cancel()
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				// The store may have granted the slot before the context
				// ended; free it rather than wait for its TTL.
				s.held = true
				l.undo(ls)
				return nil, ctxErr
			}
			if outOfBudget {
				// Out of budget: the store may still grant the slot; free it
				// in the background rather than leave it for its TTL.
				err = &BudgetError{Budget: l.budgetOf(s.limit), Err: err}
				l.releaseLater(s.limit, ls.owner)
			}
			l.storeFailed(s.limit, err)
			if l.failModeOf(s.limit) == FailClosed {
				l.undo(ls)
				return nil, &StoreError{Limit: s.limit, Err: err}
			}
			s.held = false // runs unguarded for this limit
			continue
		}
		if ok {
			s.held = true
			// Counted from before the store call: the lease lives at least
			// this long in the store.
			s.renewAt, s.deadline = now+s.limit.ttl/3, now+s.limit.ttl
		}
		l.storeAnswered(s.limit.home())
		if !ok {
			l.undo(ls)
			return &s.limit, nil
		}
	}
	return nil, nil
}

// undo releases the slots ls took in a try that did not complete.
func (l *Limiter) undo(ls *Lease) {
	for i := range ls.slots {
		s := &ls.slots[i]
		if s.held {
			s.held = false // first: an observer that panics in releaseSlot leaves it released once
			l.releaseSlot(ls.owner, s)
		}
	}
}

// releaseSlot frees one slot in the store and wakes a local waiter. On a
// store that releases asynchronously (AsyncReleaser), a plain limit's slot
// is freed without waiting: the waiter is woken when the store has freed it.
func (l *Limiter) releaseSlot(owner Owner, s *slot) {
	if l.releaser.async != nil && s.limit.plain() {
		l.releaser.send(s.limit, owner, s.deadline)
		return
	}
	ctx, cancel := l.bound(context.Background(), l.budgetOf(s.limit))
	err := l.releaseIn(ctx, &s.limit, owner, false)
	cancel()
	if err != nil {
		// Retried in the background until it succeeds or the slot expires.
		l.storeFailed(s.limit, err)
		l.releaser.retry(s.limit, owner, s.deadline)
	} else {
		l.storeAnswered(s.limit.home())
	}
	l.waiters.wake(s.limit.pool)
}

// releaseLater frees, in the background and within the budget, a slot that
// the store may have granted after its caller stopped waiting. It reports
// nothing: the call that timed out reported the outage.
func (l *Limiter) releaseLater(lim Limit, owner Owner) {
	go func() {
		ctx, cancel := l.bound(context.Background(), l.budgetOf(lim))
		defer cancel()
		_ = l.releaseIn(ctx, &lim, owner, false)
	}()
}

// budgetOf returns lim's decision budget.
func (l *Limiter) budgetOf(lim Limit) time.Duration {
	if lim.budget > 0 {
		return lim.budget
	}
	return l.budget
}

func noop() {}

// bound gives a store call the budget d as a deadline, unless the store
// never blocks or ctx ends sooner anyway.
func (l *Limiter) bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if !l.blocks {
		return ctx, noop
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, noop
	}
	return context.WithTimeout(ctx, d)
}

func (l *Limiter) failModeOf(lim Limit) FailMode {
	if lim.fail != FailDefault {
		return lim.fail
	}
	return l.failMode
}

// admit hands a fully acquired lease to its holder: it starts renewing it and
// reports SlotAcquired for each slot. If an observer panics, every slot is
// released, SlotReleased is reported for each SlotAcquired already reported,
// and the panic goes on.
func (l *Limiter) admit(ctx context.Context, ls *Lease, waited time.Duration) {
	ls.admitted = true
	if !ls.member {
		l.keeper.add(ls) // member leases are kept by the node's heartbeat
	}
	if l.observer == nil {
		return
	}
	reported := 0
	defer func() {
		if r := recover(); r != nil {
			ls.release(reported)
			panic(r)
		}
	}()
	for i := range ls.slots {
		if s := &ls.slots[i]; s.held {
			// Counted before the call: an observer that panics received the
			// event (and Observers delivers it to every observer first), so
			// it receives the SlotReleased that balances it.
			reported++
			observe(ctx, l.observer, Event{Kind: SlotAcquired, Family: s.limit.family, Limit: s.limit, Waited: waited})
		}
	}
}

// refused reports a refusal of lim after waited, to the observer and to the
// inspection's recent refusals.
func (l *Limiter) refused(ctx context.Context, lim Limit, waited time.Duration) {
	if l.inspect != nil {
		l.inspect.refused(lim, waited)
	}
	if l.observer != nil {
		observe(ctx, l.observer, Event{Kind: LimitExceeded, Family: lim.family, Limit: lim, Waited: waited})
	}
}

func (l *Limiter) emit(e Event) {
	if l.observer != nil {
		if e.Limit.valid() {
			e.Family = e.Limit.family
		}
		l.observer.Observe(e)
	}
}

// Emit sends e to the Limiter's observer: front doors built on the Limiter
// (pause, say) report their own events through it, so that one observer
// sees everything. An Event with a Limit takes the limit's family.
func (l *Limiter) Emit(e Event) { l.emit(e) }

// Call runs op, a call to the Limiter's store that a front door makes on
// lim's behalf (a pause, a pace, a mark), within lim's decision budget, and
// accounts for it as the Limiter's own calls are: a failure counts in the
// outage of the store's partition that holds lim's pool (reported once, as
// StoreFailed), a success may end it. It returns op's error, a *BudgetError
// when the budget ran out first, or the context's error when ctx ended,
// which is never a store failure.
func (l *Limiter) Call(ctx context.Context, lim Limit, op func(ctx context.Context) error) error {
	bctx, cancel := l.bound(ctx, l.budgetOf(lim))
	err := op(bctx)
	bctxErr := bctx.Err()
	cancel()
	switch {
	case err == nil:
		l.storeAnswered(lim.home())
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case bctxErr != nil:
		err = &BudgetError{Budget: l.budgetOf(lim), Err: err}
	}
	l.storeFailed(lim, err)
	return err
}

// partition returns the part of the store that holds pool.
func (l *Limiter) partition(pool PoolID) string {
	if l.parts == nil {
		return ""
	}
	return l.parts.Partition(pool)
}

// storeFailed reports the first failure of an outage of the store's
// partition that holds lim's pool.
func (l *Limiter) storeFailed(lim Limit, err error) {
	part := l.partition(lim.home())
	if l.outages.failed(part, l.precise()) { // outages are timed precisely: they are rare
		l.emit(Event{Kind: StoreFailed, Limit: lim, Node: part, Err: err})
	}
}

// storeAnswered ends the outage of pool's partition, if it has one and has
// answered without failing for RecoverAfter.
func (l *Limiter) storeAnswered(pool PoolID) {
	if !l.outages.any() {
		return
	}
	part := l.partition(pool)
	if o, ok := l.outages.answered(part, l.precise()); ok {
		l.emit(Event{Kind: StoreRecovered, Node: part, Held: l.precise() - o.since, Failures: o.failures})
	}
}

// Do runs fn while holding one slot of every limit, and releases them when fn
// returns or panics. It returns Acquire's error without running fn, or fn's
// error. Since fn never sees the lease, Do reuses it: with one limit taken
// without waiting, its steady path allocates nothing. On a store that lives
// in the process (a Pinner: memstore), such a slot is held with no expiry
// and without a Lease, so it is never renewed (Inspect shows it as this
// node's all the same, but without its label, unless WithInspection is set,
// when Do makes a Lease as Acquire does). A fn that never returns holds
// its slot for good, where a renewed slot is held until a TTL after Close.
func (l *Limiter) Do(ctx context.Context, fn func(context.Context) error, limits ...Limit) error {
	if l.pinnable(limits) {
		return l.doPinned(ctx, fn, limits)
	}
	ls, err := l.acquire(ctx, nil, nil, limits, true)
	if err != nil {
		return err
	}
	defer ls.reuse() // fn never sees ls
	return fn(ctx)
}

// pinnable reports whether Do can take its limits pinned (doPinned): one
// plain limit, taken without waiting, on a Pinner, with no shadow and no
// inspection (whose reports read the caller's label from the keeper's list
// of leases).
func (l *Limiter) pinnable(limits []Limit) bool {
	if len(limits) != 1 || l.pinner == nil || l.blocks || l.inspect != nil || l.shadowAll {
		return false
	}
	lim := &limits[0]
	return lim.valid() && lim.plain() && lim.wait == 0 && !lim.shadow
}

// doPinned is Do for a pinnable limit. Its slot is held with no expiry and
// no renewal, and no Lease is made: nothing but this call can reach it.
// What it reports is what acquire, admit and release report for it.
func (l *Limiter) doPinned(ctx context.Context, fn func(context.Context) error, limits []Limit) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if l.ov != nil {
		limits = l.ov.apply(limits)
	}
	lim := &limits[0]
	if lim.max == 0 {
		l.refused(ctx, *lim, 0)
		return &LimitError{Limit: *lim}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := l.now()
	owner := l.newOwner(start)
	ok, err := l.pinner.AcquirePinned(ctx, lim.pool, owner, lim.max, lim.ttl)
	switch {
	case err != nil: // a Pinner does not fail; if one does, as try would
		if ctxErr := ctx.Err(); ctxErr != nil {
			l.releasePinned(lim, owner, start, false) // in case it was taken
			return ctxErr
		}
		l.storeFailed(*lim, err)
		if l.failModeOf(*lim) == FailClosed {
			return &StoreError{Limit: *lim, Err: err}
		}
		return fn(ctx) // unguarded
	case !ok:
		l.storeAnswered(lim.home())
		l.refused(ctx, *lim, 0)
		return &LimitError{Limit: *lim}
	}
	// Deferred before any event is sent: a pinned slot does not expire, so
	// an observer that panics must not leave it held. SlotReleased is sent
	// only if SlotAcquired was (marked before the call: an observer that
	// panics on it received it).
	reported := false
	defer func() { l.releasePinned(lim, owner, start, reported) }()
	l.storeAnswered(lim.home())
	if l.observer != nil {
		reported = true
		observe(ctx, l.observer, Event{Kind: SlotAcquired, Family: lim.family, Limit: *lim})
	}
	return fn(ctx)
}

// releasePinned frees doPinned's slot of lim, taken by owner at start, and
// with report sends SlotReleased. A failed release is retried for a TTL, as
// a renewed lease's would be.
func (l *Limiter) releasePinned(lim *Limit, owner Owner, start time.Duration, report bool) {
	if err := l.store.Release(context.Background(), lim.pool, owner); err != nil {
		l.storeFailed(*lim, err)
		l.releaser.retry(*lim, owner, l.now()+lim.ttl)
	} else {
		l.storeAnswered(lim.home())
	}
	l.waiters.wake(lim.pool)
	if report && l.observer != nil {
		l.observer.Observe(Event{Kind: SlotReleased, Family: lim.family, Limit: *lim, Held: l.precise() - start})
	}
}
