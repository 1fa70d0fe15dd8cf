package keycap

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keycap/keycap/internal/coarse"
	"github.com/keycap/keycap/store"
)

// request is one call to take slots: its limits, and what kind of lease it
// asks for. Acquire and Do ask for a plain one; the front doors' calls (the
// frontdoor package) for a node's member or a parked caller.
type request struct {
	limits []Limit
	member *string  // a member lease of the node, kept by its heartbeat
	park   *parking // a caller that parks when its wait ends
	reuse  bool     // Do: the lease may be a released one kept for reuse
}

// acquire takes the slots of r's limits, or none.
func (l *Limiter) acquire(ctx context.Context, r request) (*Lease, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	wait, err := check(r.limits)
	if err != nil {
		return nil, err
	}
	if l.ov != nil {
		r.limits = l.ov.apply(r.limits)
	}
	if l.hasShadow(r.limits) {
		return l.acquireShadowed(ctx, r)
	}
	if err := l.checkRequest(r); err != nil {
		return nil, err
	}
	for i := range r.limits {
		if r.limits[i].spec.Max == 0 {
			l.refused(ctx, &r.limits[i], 0)
			return nil, &LimitError{Limit: r.limits[i]}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	start := l.now()
	ls := newLease(l, r.limits, start, r.reuse)
	if len(r.limits) == 0 { // nothing to take (every limit a shadow)
		l.admit(ctx, ls, 0)
		return ls, nil
	}
	if l.inspect != nil {
		if label, ok := ctx.Value(labelKey{}).(string); ok {
			ls.more().label = label
		}
	}
	switch {
	case r.member != nil:
		ls.owner, ls.member, ls.named = store.MemberOf(l.nodes.id, *r.member), true, true
		// Registered before the store grants it, so that a heartbeat
		// meanwhile keeps it rather than dropping it as a ghost.
		l.nodes.add(ls)
		defer func() {
			if !ls.admitted {
				l.nodes.remove(ls)
			}
		}()
	case r.park != nil:
		ls.owner, ls.named = r.park.Owner, true
		if l.has(store.Lines | store.Notifications) {
			l.parked.cancel(r.park.Owner) // an attempt that comes back
			return l.waitInLine(ctx, ls, wait, start, r.park)
		}
	}
	switch {
	case wait > 0 && l.has(store.Lines):
		return l.waitInLine(ctx, ls, wait, start, nil)
	case wait > 0:
		return l.waitFor(ctx, ls, wait, start)
	}
	refused, err := l.take(ctx, ls, nil, start, store.Ticket{})
	if err != nil {
		return nil, err
	}
	if refused >= 0 {
		lim := &ls.slots[refused].limit
		l.refused(ctx, lim, 0)
		return nil, &LimitError{Limit: *lim}
	}
	ls.plain = len(ls.slots) == 1
	l.admit(ctx, ls, 0)
	return ls, nil
}

// checkRequest checks that the store can serve r: weights and parents need
// Shares, fencing tokens Fences, member leases Members (and no weight,
// parent or token), and no two limits of one request may share a parent.
func (l *Limiter) checkRequest(r request) error {
	if r.member != nil {
		if err := l.nodes.check(r.limits); err != nil {
			return err
		}
	}
	for i := range r.limits {
		lim := &r.limits[i]
		if lim.spec.Fence && !l.has(store.Fences) {
			return fmt.Errorf("limit %q asks for fencing tokens: %w", lim.spec.Name, l.need(store.Fences))
		}
		if lim.spec.Fence && r.member != nil {
			return fmt.Errorf("%w: limit %q asks for fencing tokens, which a member lease cannot carry", ErrInvalidLimit, lim.spec.Name)
		}
		if lim.plain() {
			continue
		}
		if !l.has(store.Shares) {
			return fmt.Errorf("limit %q has a weight or a parent: %w", lim.spec.Name, l.need(store.Shares))
		}
		if r.member != nil {
			return fmt.Errorf("%w: limit %q has a weight or a parent, which a member lease cannot take", ErrInvalidLimit, lim.spec.Name)
		}
		p := lim.spec.Parent
		if p == nil {
			continue
		}
		if p.adaptive != nil && !l.has(store.Totals) {
			return fmt.Errorf("limit %q has the adaptive parent %q: %w", lim.spec.Name, p.name, l.need(store.Totals))
		}
		for _, prev := range r.limits[:i] {
			if pp := prev.spec.Parent; pp != nil && pp.pool == p.pool {
				return fmt.Errorf("%w: limits %q and %q of parent %q in one Acquire", ErrInvalidLimit, prev.spec.Name, lim.spec.Name, p.name)
			}
		}
	}
	return nil
}

// waitFor takes ls's slots on a store without lines, waiting up to wait
// for a full pool to free a slot: woken by a local release, or polling for
// one elsewhere.
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
		refused, err := l.take(ctx, ls, nil, now, store.Ticket{})
		if err != nil {
			return nil, err
		}
		if refused < 0 {
			l.admit(ctx, ls, now-start)
			return ls, nil
		}
		lim := &ls.slots[refused].limit
		waited := l.precise() - start
		if waited >= wait {
			l.refused(ctx, lim, waited)
			return nil, &LimitError{Limit: *lim, Waited: waited}
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

// outcome is what one slot's decision came to.
type outcome uint8

const (
	refused outcome = iota // the pool is full (with a ticket: the caller waits in its line)
	held                   // the slot is held
	skipped                // the store failed and the limit fails open: no slot, run unguarded
)

// take is the one path by which slots are taken. It asks the store for
// each slot of ls once, in order (nil: as they are), starting at now, and
// returns the index of the slot that refused, or -1 when every slot is held
// or skipped. With a ticket (tk.TTL > 0) a refused caller waits in that
// slot's line and the slots taken stay held; without one, a refusal
// releases them. On an error (the context's, or a *StoreError of a limit
// that fails closed) everything taken is undone, the ticket included.
//
// A slot whose store call ran out of budget may still be granted: takeSlot
// frees it in the background. So that this release cannot land after a
// later try of the same caller and free what that one is granted, a
// refusal without a ticket after such a slot gives the lease a new owner
// for its next try. (With a ticket or a named owner, nothing is freed: the
// caller's next try claims the slot, and an abandoned one expires.)
func (l *Limiter) take(ctx context.Context, ls *Lease, order []int, now time.Duration, tk store.Ticket) (int, error) {
	late := false
	cur := -1
	if l.observer != nil {
		// An observer that panics on a store event (StoreRecovered,
		// StoreFailed) must not leave the slots taken so far held: ls is not
		// admitted, so nobody would release or renew them.
		defer func() {
			if r := recover(); r != nil {
				l.undo(ls, cur, tk.TTL > 0, true)
				panic(r)
			}
		}()
	}
	for k := range ls.slots {
		i := k
		if order != nil {
			i = order[k]
		}
		cur = i
		s := &ls.slots[i]
		t := tk
		if t.Claim == claimLease {
			t.Claim = s.limit.spec.TTL
		}
		o, token, lt, err := l.takeSlot(ctx, &s.limit, ls.owner, t, false, ls.named)
		late = late || lt
		if err != nil {
			// A slot asked for by a caller that left may have been granted:
			// it is given back. One the store failed to take is not (one
			// out of budget is freed by takeSlot).
			l.undo(ls, i, tk.TTL > 0, ctx.Err() != nil)
			return 0, err
		}
		switch o {
		case held:
			if !s.held && s.limit.spec.Parent != nil {
				s.since = l.now() // its use starts now, not when it was asked for
			}
			s.held, s.token = true, token
			// Counted from before the store call: the lease lives at least
			// this long in the store.
			s.renewAt, s.deadline = now+s.limit.spec.TTL/3, now+s.limit.spec.TTL
		case skipped:
			s.held, s.token = false, 0 // runs unguarded for this limit
			if lt && tk.TTL > 0 {
				// Its ticket may have reached the store: it leaves the
				// line, and a slot handed to it is freed.
				l.releaseLater(s.limit, ls.owner, true)
			}
		case refused:
			s.held = false
			if tk.TTL == 0 {
				l.undo(ls, -1, false, false)
				if late && !ls.named {
					ls.owner = l.newOwner(now)
				}
			}
			return i, nil
		}
	}
	cur = -1
	return -1, nil
}

// takeSlot asks the store, once, for owner's slot of lim (with tk, a
// ticket in its line; with pin, a slot with no expiry), and applies the
// failure policy: a failure is reported (call) and then, for a limit that
// fails open, skipped, and otherwise returned as a *StoreError; the
// context's error is returned as it is. A slot the store may still grant
// after the budget ran out (late) is freed in the background, but for a
// caller with a ticket or a named owner (named: a member, a parked caller),
// whose next try, under the same owner, claims it.
func (l *Limiter) takeSlot(ctx context.Context, lim *Limit, owner store.Owner, tk store.Ticket, pin, named bool) (o outcome, token uint64, late bool, err error) {
	bctx, cancel, budget := ctx, context.CancelFunc(nil), time.Duration(0)
	if l.features&store.InProcess == 0 { // deadline, inlined
		bctx, cancel, budget = l.bounded(ctx, lim)
	}
	g, err := l.store.Acquire(bctx, lim.pool, owner, store.Demand{Max: lim.spec.Max, TTL: lim.spec.TTL,
		Line: tk, Pinned: pin, Shared: l.shared(lim), Fence: lim.spec.Fence})
	if err != nil || cancel != nil {
		err = l.end(ctx, bctx, cancel, budget, err)
	}
	if err != nil || l.outages.any() {
		l.account(ctx, lim, err)
	}
	switch {
	case err == nil && g.Granted:
		return held, g.Token, false, nil
	case err == nil:
		return refused, 0, false, nil
	case ctx.Err() != nil:
		return refused, 0, false, err
	}
	if _, late = err.(*BudgetError); late && tk.TTL == 0 && !named {
		l.releaseLater(*lim, owner, false)
	}
	if l.failModeOf(lim) == FailClosed {
		return refused, 0, late, &StoreError{Limit: *lim, Err: err}
	}
	return skipped, 0, late, nil
}

// The failure policy of every store call, in three steps: bound gives the
// call the decision budget as its deadline (none on a store that lives in
// the process); end classifies its outcome: nil, the caller's context
// error when ctx ended (whatever the store returned, and never a
// failure), a *BudgetError when the budget ran out first (overBudget says
// whether the store or this process took the time), or the store's
// error; account reports a failure as the outage of the store's partition
// that holds lim's pool, once per outage, and a success ends that outage
// once the partition has answered for RecoverAfter — but a budget that
// this process used up (BudgetError.Overloaded) is reported as
// ProcessOverloaded, and neither starts nor ends an outage. The hot calls
// (a take, a release) make the three steps around their store call; the
// others go through run (and call, where outages are counted). A release
// sent without waiting (releaser.send) has its budget kept by the store,
// and goes through overBudget and account.

// call runs op, one store call made for lim, under the failure policy,
// outages counted.
func (l *Limiter) call(ctx context.Context, lim *Limit, op func(ctx context.Context) error) error {
	return l.account(ctx, lim, l.run(ctx, l.budgetOf(lim), op))
}

// run runs op within the decision budget d, and returns end's verdict.
func (l *Limiter) run(ctx context.Context, d time.Duration, op func(ctx context.Context) error) error {
	bctx, cancel := l.bound(ctx, d)
	return l.end(ctx, bctx, cancel, d, op(bctx))
}

// bounded is bound for a call made for lim, within its budget, on a store
// that may block; on a store that lives in the process, callers skip it
// (a nil cancel: no deadline, and no call made to say so).
func (l *Limiter) bounded(ctx context.Context, lim *Limit) (context.Context, context.CancelFunc, time.Duration) {
	budget := l.budgetOf(lim)
	bctx, cancel := l.bound(ctx, budget)
	return bctx, cancel, budget
}

// end classifies err, what a store call made with bctx (from bound, within
// budget, for a caller's ctx) returned, and ends bctx (cancel may be nil).
func (l *Limiter) end(ctx, bctx context.Context, cancel context.CancelFunc, budget time.Duration, err error) error {
	if cancel == nil {
		cancel = noop
	}
	if err == nil {
		cancel()
		return nil
	}
	late := bctx.Err() != nil // read before cancel, which ends bctx too
	cancel()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case late:
		dl, _ := bctx.Deadline() // bound's: budget after the call began
		return overBudget(budget, budget+time.Since(dl), err)
	}
	return err
}

// overBudget is the verdict on a store call that ran out of its budget,
// after its caller waited waited, with err from the store. The caller's
// wait is bounded all the same, and the limit's fail mode applies: it has
// no answer. What the verdict decides is whom to blame. Time before the
// request reached the store, and time the process was not running, say
// nothing of the store: the call counts as the store's failure only when
// the store had it, unanswered, for at least half of the budget while the
// process was running. Otherwise the process used up the budget
// (Overloaded): a machine loaded beyond its cores, a CPU quota used up, a
// pipeline's sender not run in time.
//
// The store had the call from when it says (store.UnansweredError; a store
// that does not say is taken to have had it from the start) to the
// deadline, less the time the process was stalled meanwhile
// (coarse.Stalled): the times a goroutine ready to run waited at least an
// eighth of the budget to be run. A call waits for the scheduler about four
// times (its caller, its pipeline's sender, the reader of the reply, its
// caller again), so that stalls that long can take half of the budget,
// and shorter ones — a busy process's few milliseconds, all the time — do
// not count. Time past the deadline is no one's: the budget was spent.
func overBudget(budget, waited time.Duration, err error) *BudgetError {
	had := budget
	var u *store.UnansweredError
	if errors.As(err, &u) {
		had = min(u.Outstanding, budget)
	}
	deadline := coarse.Precise() - max(waited-budget, 0)
	had -= coarse.Stalled(deadline-had, deadline, budget/8)
	return &BudgetError{Budget: budget, Err: err, Waited: waited, StoreTime: had, Overloaded: 2*had < budget}
}

// account reports err, end's verdict on a store call for lim, to the
// outage tracking, and returns it.
func (l *Limiter) account(ctx context.Context, lim *Limit, err error) error {
	switch {
	case err == nil:
		if l.outages.any() {
			l.storeAnswered(lim.home())
		}
	case ctx.Err() == nil:
		l.storeFailed(lim, err)
	}
	return err
}

// undo gives back what a take that did not complete took: every slot held
// is released. The slot failed (-1: none) is left when the caller queued
// for it (its ticket, and a slot handed to it, are taken out of the line in
// the background), and otherwise released like a held one when the store
// may have granted it (maybe).
func (l *Limiter) undo(ls *Lease, failed int, queued, maybe bool) {
	for i := range ls.slots {
		if s := &ls.slots[i]; s.held && i != failed {
			s.held = false // first: an observer that panics in releaseSlot leaves it released once
			l.releaseSlot(ls.owner, s)
		}
	}
	if failed < 0 {
		return
	}
	s := &ls.slots[failed]
	s.held = false
	switch {
	case queued:
		l.releaseLater(s.limit, ls.owner, true)
	case maybe:
		l.releaseSlot(ls.owner, s)
	}
}

// releaseSlot frees one held slot in the store and wakes a local waiter. On
// a store that releases asynchronously, a plain limit's slot is freed
// without waiting: the waiter is woken when the store has freed it. A
// release that fails is retried in the background until it succeeds or the
// slot expires.
func (l *Limiter) releaseSlot(owner store.Owner, s *slot) {
	if l.releaser.async && s.limit.plain() {
		l.releaser.send(s.limit, owner, s.deadline)
		return
	}
	var held time.Duration
	if s.limit.spec.Parent != nil && s.since > 0 {
		held = max(l.now()-s.since, 1) // the slot-time its key is charged
	}
	if err := l.release(context.Background(), &s.limit, owner, false, held); err != nil {
		l.releaser.retry(s.limit, owner, s.deadline)
	}
	l.waiters.wake(s.limit.pool)
}

// release frees owner's lease of lim (with leave, its ticket too) under the
// failure policy; held is how long it was used (store.Demand.Held; 0: not
// known). A slot a parent keeps for its key is passed on once the parent's
// keep has passed, if nobody took it back.
func (l *Limiter) release(ctx context.Context, lim *Limit, owner store.Owner, leave bool, held time.Duration) error {
	bctx, cancel, budget := ctx, context.CancelFunc(nil), time.Duration(0)
	if l.features&store.InProcess == 0 { // deadline, inlined
		bctx, cancel, budget = l.bounded(ctx, lim)
	}
	d := lim.demand()
	d.Shared, d.Held = l.shared(lim), held
	kept, err := l.store.Release(bctx, lim.pool, owner, d, leave)
	if err != nil || cancel != nil {
		err = l.end(ctx, bctx, cancel, budget, err)
	}
	if err != nil || l.outages.any() {
		l.account(ctx, lim, err)
	}
	if kept {
		l.passOnLater(*lim)
	}
	return err
}

// releaseLater frees (or, with leave, leaves the line of) lim for owner in
// the background, within the budget. Its failure is not retried: the call
// that could not tell reported the outage, and the slot expires by itself.
func (l *Limiter) releaseLater(lim Limit, owner store.Owner, leave bool) {
	go func() { _ = l.release(context.Background(), &lim, owner, leave, 0) }()
}

// passOnLater makes, once lim's parent's keep has passed, a call on the
// parent that passes the slot it kept on to the waiting keys if its key did
// not take it back: the waiters would otherwise find it at their next poll.
// The call releases nothing (a fresh owner holds no lease).
func (l *Limiter) passOnLater(lim Limit) {
	time.AfterFunc(lim.spec.Parent.keep+time.Millisecond, func() {
		if !l.closed.Load() {
			_ = l.release(context.Background(), &lim, store.NewOwner(), false, 0)
		}
	})
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
	for i := range ls.slots {
		if s := &ls.slots[i]; s.held {
			if p := s.limit.spec.Parent; p != nil && p.adaptive != nil {
				if t := l.tuners.of(p); t != nil {
					t.started(s.limit.spec.Weight)
					s.tuner = t
				}
			}
		}
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
			observe(ctx, l.observer, Event{Kind: SlotAcquired, Family: s.limit.spec.Family, Limit: s.limit, Waited: waited})
		}
	}
}

// refused reports a refusal of lim after waited, to the observer and to the
// inspection's recent refusals.
func (l *Limiter) refused(ctx context.Context, lim *Limit, waited time.Duration) {
	if l.inspect != nil {
		l.inspect.refused(lim, waited)
	}
	if l.observer != nil {
		observe(ctx, l.observer, Event{Kind: LimitExceeded, Family: lim.spec.Family, Limit: *lim, Waited: waited})
	}
}

// emit sends e to the observer; an Event with a Limit takes its family.
func (l *Limiter) emit(e Event) {
	if l.observer != nil {
		if e.Limit.valid() {
			e.Family = e.Limit.spec.Family
		}
		l.observer.Observe(e)
	}
}

// partition returns the part of the store that holds pool.
func (l *Limiter) partition(pool store.PoolID) string {
	if l.features&store.Partitions == 0 {
		return ""
	}
	return l.store.Partition(pool)
}

// storeFailed reports the first failure of an outage of the store's
// partition that holds lim's pool, or, for a budget that this process used
// up, the call alone (ProcessOverloaded).
func (l *Limiter) storeFailed(lim *Limit, err error) {
	part := l.partition(lim.home())
	if be := (*BudgetError)(nil); errors.As(err, &be) && be.Overloaded {
		// Not the store's failure (overBudget): no outage starts, and the
		// one under way, if any, neither ends nor goes on.
		l.emit(Event{Kind: ProcessOverloaded, Limit: *lim, Node: part, Err: err, Waited: be.Waited})
		return
	}
	if l.outages.failed(part, l.precise()) { // outages are timed precisely: they are rare
		l.emit(Event{Kind: StoreFailed, Limit: *lim, Node: part, Err: err})
	}
}

// storeAnswered ends the outage of pool's partition, if it has one and has
// answered without failing for RecoverAfter.
func (l *Limiter) storeAnswered(pool store.PoolID) {
	if !l.outages.any() {
		return
	}
	part := l.partition(pool)
	if o, ok := l.outages.answered(part, l.precise()); ok {
		l.emit(Event{Kind: StoreRecovered, Node: part, Held: l.precise() - o.since, Failures: o.failures})
	}
}

// pinnable reports whether Do can take its limits pinned (doPinned): one
// plain limit, taken without waiting, on a store that pins, with no shadow
// and no inspection (whose reports read the caller's label from the
// keeper's list of leases).
func (l *Limiter) pinnable(limits []Limit) bool {
	if len(limits) != 1 || !l.has(store.Pinned|store.InProcess) || l.inspect != nil || l.shadowAll {
		return false
	}
	lim := &limits[0]
	return lim.valid() && lim.plain() && lim.spec.Wait == 0 && !lim.spec.Shadow && !lim.spec.Fence
}

// doPinned is Do for a pinnable limit. Its slot is held with no expiry and
// no renewal, and no Lease is made: nothing but this call can reach it. It
// takes the slot through takeSlot, as every slot is taken, and reports what
// acquire, admit and release report for it.
func (l *Limiter) doPinned(ctx context.Context, fn func(context.Context) error, lim *Limit) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if l.ov != nil {
		o := l.ov.applyOne(lim)
		lim = &o
	}
	if lim.spec.Max == 0 {
		l.refused(ctx, lim, 0)
		return &LimitError{Limit: *lim}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := l.now()
	owner := l.newOwner(start)
	// Deferred before the store call: a pinned slot does not expire, so an
	// observer that panics on an event (StoreRecovered, as the slot is
	// taken; SlotAcquired) must not leave it held. SlotReleased is sent only
	// if SlotAcquired was (marked before the call: an observer that panics
	// on it received it).
	st := pinState{taking: true}
	defer l.pinnedDone(lim, &owner, start, &st)
	o, _, _, err := l.takeSlot(ctx, lim, owner, store.Ticket{}, true, false)
	st.taking = false
	switch {
	case err != nil:
		if ctx.Err() != nil {
			l.releasePinned(lim, owner, start, false) // it may have been granted
		}
		return err
	case o == refused:
		l.refused(ctx, lim, 0)
		return &LimitError{Limit: *lim}
	case o == skipped:
		return fn(ctx) // unguarded
	}
	st.holding = true
	if l.observer != nil {
		st.reported = true
		observe(ctx, l.observer, Event{Kind: SlotAcquired, Family: lim.spec.Family, Limit: *lim})
	}
	return fn(ctx)
}

// pinState is where doPinned is: taking its slot, holding it, and whether
// SlotAcquired was sent.
type pinState struct{ taking, holding, reported bool }

// pinnedDone, deferred by doPinned, releases its slot when held, and when
// a panic (an observer's, on the event of the take) cut the take short.
func (l *Limiter) pinnedDone(lim *Limit, owner *store.Owner, start time.Duration, st *pinState) {
	switch {
	case st.holding:
		l.releasePinned(lim, *owner, start, st.reported)
	case st.taking:
		if r := recover(); r != nil {
			l.releasePinned(lim, *owner, start, false) // it may have been granted
			panic(r)
		}
	}
}

// releasePinned frees doPinned's slot of lim, taken by owner at start, and
// with report sends SlotReleased. A failed release is retried for a TTL, as
// a renewed lease's would be.
func (l *Limiter) releasePinned(lim *Limit, owner store.Owner, start time.Duration, report bool) {
	if err := l.release(context.Background(), lim, owner, false, 0); err != nil {
		l.releaser.retry(*lim, owner, l.now()+lim.spec.TTL)
	}
	l.waiters.wake(lim.pool)
	if report && l.observer != nil {
		l.observer.Observe(Event{Kind: SlotReleased, Family: lim.spec.Family, Limit: *lim, Held: l.precise() - start})
	}
}
