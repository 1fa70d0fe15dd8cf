package keycap

import (
	"sync"
	"time"

	"github.com/keycap/keycap/store"
)

// Lease is a set of slots granted by one Acquire. The Limiter renews it in the
// background while it is held; Release frees it.
type Lease struct {
	l        *Limiter
	owner    store.Owner
	acquired time.Duration // on the Limiter's clock
	slots    []slot
	one      [1]slot // backing for the common single-limit lease

	mu    sync.Mutex  // guards released, lost, extra once admitted, and each slot's renewal state
	extra *leaseExtra // nil on the common path

	// The keeper's list of held leases, guarded by the keeper shard's lock.
	prev, next *Lease

	pins uint16 // the keeper's renewals under way that read the lease (one per slot at most); guarded by mu

	member   bool // a member lease of the node, kept by its heartbeat (acquireAs)
	named    bool // its owner is derived from a name (a member, a parked caller): never replaced
	admitted bool // handed to its holder
	released bool // guarded by mu
	lost     bool // guarded by mu
	listed   bool // guarded by the keeper shard's lock
	plain    bool // one limit, taken without waiting: reusable once released (see reuse)
}

// leaseExtra is what only some leases carry, apart so that the common
// lease stays small.
type leaseExtra struct {
	lostCh chan struct{} // Lost's channel, once asked for
	shadow *Lease        // the slots of its shadow limits, released with it; nil: none
	label  string        // the caller's label (WithLabel), kept when the Limiter inspects

	overloaded bool // Overloaded was called
}

// more returns ls.extra, made if needed. The caller holds ls.mu, or ls is
// not yet admitted.
func (ls *Lease) more() *leaseExtra {
	if ls.extra == nil {
		ls.extra = &leaseExtra{}
	}
	return ls.extra
}

// label returns the caller's label. The caller holds ls.mu.
func (ls *Lease) label() string {
	if ls.extra == nil {
		return ""
	}
	return ls.extra.label
}

// A lease holds a slot (a Limit, and so a Spec) per limit, inline for one:
// keep their fields packed (bools together), as the lease's size class is
// paid by every Acquire.
type slot struct {
	limit    Limit
	renewAt  time.Duration // next renewal, on the Limiter's clock
	deadline time.Duration // when the slot expires in the store unless renewed
	since    time.Duration // when the slot was granted, on the Limiter's clock
	token    uint64        // its fencing token (Spec.Fence); 0: none
	tuner    *tuner        // the adaptive parent's tuner that counted it (started), to end it
	held     bool          // a slot is held in the store (false: skipped by a failing-open store)
	lost     bool          // found gone on renewal
}

// newLease makes a lease of limits, acquired at now; with reuse, one that
// Lease.reuse kept, if any.
func newLease(l *Limiter, limits []Limit, now time.Duration, reuse bool) *Lease {
	var ls *Lease
	if reuse && len(limits) == 1 {
		if v, ok := l.free.Get().(*Lease); ok {
			ls = v
		}
	}
	if ls == nil {
		ls = new(Lease)
	}
	ls.l, ls.owner, ls.acquired = l, l.newOwner(now), now
	if len(limits) == 1 {
		ls.slots = ls.one[:]
	} else {
		ls.slots = make([]slot, len(limits))
	}
	for i := range limits {
		ttl := limits[i].spec.TTL
		ls.slots[i] = slot{limit: limits[i], renewAt: now + ttl/3, deadline: now + ttl}
	}
	return ls
}

// Limits returns the limits the lease was acquired for; none for a nil
// lease.
func (ls *Lease) Limits() []Limit {
	if ls == nil {
		return nil
	}
	out := make([]Limit, len(ls.slots))
	for i := range ls.slots {
		out[i] = ls.slots[i].limit
	}
	return out
}

// fenced reports whether one of the lease's limits asks for fencing tokens.
func (ls *Lease) fenced() bool {
	for i := range ls.slots {
		if ls.slots[i].limit.spec.Fence {
			return true
		}
	}
	return false
}

// Overloaded reports that the work the lease guards met an overload signal
// — a timeout, a 429, 503 or 529, RESOURCE_EXHAUSTED, an error the caller
// counts as one — for the adaptive parents of its limits (Adaptive): they
// count it as overload, not as a latency sample. Call it before Release.
// It does nothing for a nil lease, or one with no adaptive parent.
func (ls *Lease) Overloaded() {
	if ls == nil {
		return
	}
	ls.mu.Lock()
	if !ls.released {
		ls.more().overloaded = true
	}
	ls.mu.Unlock()
}

// untune gives ls's slots back to their adaptive parents' tuners, with how
// long they were held; overloaded: the work met an overload signal.
func (l *Limiter) untune(ls *Lease, overloaded bool) {
	for i := range ls.slots {
		if s := &ls.slots[i]; s.tuner != nil {
			t := s.tuner
			s.tuner = nil
			since := s.since
			if since == 0 {
				since = ls.acquired
			}
			t.ended(s.limit.spec.Weight, max(l.now()-since, 0), overloaded)
		}
	}
}

// Guarded reports whether the lease holds a slot for every one of its limits.
// It is false when a limit failing open was skipped because the store
// failed, and for a nil lease.
func (ls *Lease) Guarded() bool {
	if ls == nil {
		return false
	}
	for i := range ls.slots {
		if !ls.slots[i].held {
			return false
		}
	}
	return true
}

// closedCh is returned by Lost for leases lost before anyone asked.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Lost returns a channel that is closed when one of the lease's slots is found
// gone on renewal: it expired in the store, so the pool may now admit another
// holder. A lease that is never lost never closes it, Release included. A
// nil lease is never lost: its channel is nil.
func (ls *Lease) Lost() <-chan struct{} {
	if ls == nil {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	e := ls.more()
	if e.lostCh == nil {
		e.lostCh = make(chan struct{})
	}
	return e.lostCh
}

// markLost records that slot s was found gone. The caller holds ls.mu. It
// returns the channel of Lost to close, if any, which the caller closes once
// it has reported the LeaseLost event: a holder woken by Lost finds the event
// already sent.
func (ls *Lease) markLost(s *slot) chan struct{} {
	s.lost = true
	if ls.lost {
		return nil
	}
	ls.lost = true
	e := ls.more()
	if e.lostCh == nil {
		e.lostCh = closedCh // later calls of Lost see it closed
		return nil
	}
	return e.lostCh
}

// Release frees the lease's slots and reports SlotReleased for each. It is
// idempotent, safe to call from any goroutine, and safe after the lease was
// lost: it frees nothing that another holder took since. A store failure
// during Release is reported to the observer, and the release retried in the
// background until it succeeds or the slot expires in the store.
//
// Release on a nil lease does nothing: a defer placed before the error
// of Acquire is checked cannot panic when Acquire refused.
func (ls *Lease) Release() {
	if ls == nil {
		return
	}
	ls.release(-1)
}

// reuse releases ls and, when nothing but its caller can still reach it,
// keeps it for a later lease of the Limiter: the steady path of Do allocates
// no lease. Only a caller that never let ls out of its hands may call it, and
// it must not touch ls afterwards (not even to Release it again). What could
// still reach a released lease is ruled out here: the keeper's renewal under
// way (pins), a Lost channel or a shadow (extra), the node's heartbeat
// (member), a wait in a line (plain), and the timers of Close (closed).
func (ls *Lease) reuse() {
	l := ls.l
	if ls.release(-1) && ls.plain && !ls.member && !l.closed.Load() {
		*ls = Lease{}
		l.free.Put(ls)
	}
}

// release frees every held slot and reports SlotReleased for the first
// reported held slots (all when reported < 0). It reports whether ls was
// released here with no renewal reading it and no extra: once released, no
// renewal starts reading it (the keeper skips released leases).
func (ls *Lease) release(reported int) (unread bool) {
	ls.mu.Lock()
	if ls.released {
		ls.mu.Unlock()
		return false
	}
	ls.released = true
	unread = ls.pins == 0 && ls.extra == nil
	var shadow *Lease
	overloaded := false
	if ls.extra != nil {
		shadow, overloaded = ls.extra.shadow, ls.extra.overloaded
	}
	ls.mu.Unlock()
	if shadow != nil {
		shadow.release(-1)
	}

	l := ls.l
	if ls.member {
		l.nodes.remove(ls)
	} else {
		l.keeper.remove(ls)
	}
	l.untune(ls, overloaded)
	for i := range ls.slots {
		if s := &ls.slots[i]; s.held {
			l.releaseSlot(ls.owner, s)
		}
	}
	if l.observer == nil {
		return unread
	}
	held := l.precise() - ls.acquired
	for i := range ls.slots {
		if s := &ls.slots[i]; s.held {
			if reported == 0 {
				break
			}
			reported--
			l.observer.Observe(Event{Kind: SlotReleased, Family: s.limit.spec.Family, Limit: s.limit, Held: held})
		}
	}
	return unread
}
