package keycap

import (
	"context"
	"fmt"
	"time"
)

// Parent is a total shared by the pools of many keys: "at most 50 exports
// at once in all, at most 10 per tenant". A limit names it with WithParent;
// a grant then needs room in the key's own pool and in the parent.
//
// While nobody waits, a key may use the parent's idle capacity up to its
// own max (it borrows). When keys wait, each slot that frees in the parent
// goes to the waiting key that is furthest below its fair share: first the
// keys below their minimum (WithMinimum), then the key that holds the
// fewest slots for its share (WithShare), the oldest waiter on a tie. So
// freed slots are split among waiting keys in proportion to their shares,
// whoever asks most often; nobody is preempted. Within a key, waiters are
// served in arrival order.
//
// A Parent is an immutable value built by NewParent. Its pool does not
// depend on a family: limits of any front door that name the same parent
// share its total.
type Parent struct {
	name string
	max  int
	keep time.Duration
	pool PoolID
}

// DefaultKeep is how long a parent keeps a freed slot for its key when
// WithKeep does not say.
const DefaultKeep = 5 * time.Millisecond

// A ParentOption sets an optional field of a Parent.
type ParentOption struct{ keep time.Duration }

// WithKeep sets how long a slot freed by a key that would be served first
// if it asked again is kept for that key while other keys wait (default
// DefaultKeep; 0 turns it off). Without it, a light key whose callers come
// straight back loses each slot it frees to the busiest waiting key, and
// then waits for the next slot to free, up to a whole job; with it, the
// key's next caller takes its slot back. A slot kept and not taken passes
// on when the time is up. Not negative.
func WithKeep(d time.Duration) ParentOption { return ParentOption{keep: d} }

// NewParent returns a parent of max slots named name. name must not be
// empty; max is at least 1. An invalid value returns an
// *InvalidLimitError naming the field.
func NewParent(name string, max int, opts ...ParentOption) (Parent, error) {
	p := Parent{name: name, max: max, keep: DefaultKeep, pool: PoolIDOf(familyInternal, "parent", name)}
	for _, o := range opts {
		p.keep = o.keep
	}
	switch {
	case name == "":
		return Parent{}, &InvalidLimitError{Field: "parent name", Value: `""`, Reason: "must not be empty"}
	case max < 1:
		return Parent{}, &InvalidLimitError{Field: "parent max", Value: fmt.Sprint(max), Reason: "must be at least 1"}
	case p.keep < 0:
		return Parent{}, &InvalidLimitError{Field: "parent keep", Value: p.keep.String(), Reason: "must be at least 0"}
	}
	return p, nil
}

// MustParent is like NewParent but panics on an invalid parent.
func MustParent(name string, max int, opts ...ParentOption) Parent {
	p, err := NewParent(name, max, opts...)
	if err != nil {
		panic(err)
	}
	return p
}

// Name returns the parent's name.
func (p Parent) Name() string { return p.name }

// Max returns the slots the parent's keys may hold at once in all.
func (p Parent) Max() int { return p.max }

// Keep returns how long a freed slot is kept for its key (WithKeep).
func (p Parent) Keep() time.Duration { return p.keep }

// Pool returns the identity of the parent's pool as stores see it.
func (p Parent) Pool() PoolID { return p.pool }

// sharing is what a limit with a parent adds to a plain one.
type sharing struct {
	parent Parent
	share  int // the key's weight in the parent's fair share
	min    int // slots the key is served first up to
}

// WithWeight makes each lease of the limit take n slots of its pool (and
// of its parent) instead of one: an export that costs 3 of max, a cheap
// read 1. A limit of weight n is granted only when n slots are free, and
// a waiter of weight n holds its place in the line until n slots are free,
// so heavy callers are not starved by light ones. Between 1 and max.
//
// Leases of different weights may share a pool. Weights need a store that
// keeps them (a Sharer: memstore, redisstore, pgstore; nullstore grants
// everything).
func WithWeight(n int) LimitOption { return LimitOption{field: fieldWeight, n: n} }

// WithParent makes the limit's pools share the total of p: see Parent.
func WithParent(p Parent) LimitOption { return LimitOption{field: fieldParent, p: &p} }

// WithShare sets the key's weight in its parent's fair share: a key of
// share 3 is served as if it were three keys of share 1. Default 1; at
// least 1. Needs WithParent.
func WithShare(n int) LimitOption { return LimitOption{field: fieldShare, n: n} }

// WithMinimum makes the key served before any key at or above its own
// minimum while it holds fewer than n slots of its parent: with no
// preemption, a minimum is a priority, and a key below it gets the next
// slots that free in the parent. Default 0; at most max. Needs WithParent.
func WithMinimum(n int) LimitOption { return LimitOption{field: fieldMin, n: n} }

// Weight returns the slots each lease of the limit takes: 1 unless
// WithWeight.
func (l Limit) Weight() int { return max(l.weight, 1) }

// Parent returns the limit's parent, if it has one.
func (l Limit) Parent() (Parent, bool) {
	if l.share == nil {
		return Parent{}, false
	}
	return l.share.parent, true
}

// Share returns the key's weight in its parent's fair share (1 without a
// parent).
func (l Limit) Share() int {
	if l.share == nil {
		return 1
	}
	return l.share.share
}

// Minimum returns the slots up to which the key is served first (0
// without a parent).
func (l Limit) Minimum() int {
	if l.share == nil {
		return 0
	}
	return l.share.min
}

// plain reports whether the limit takes one slot and has no parent: the
// store's plain calls serve it.
func (l *Limit) plain() bool { return l.weight <= 1 && l.share == nil }

// home is the pool that decides for the limit, whose handoffs wake its
// waiters and whose place in the store holds it: its parent's when it has
// one.
func (l *Limit) home() PoolID {
	if l.share != nil {
		return l.share.parent.pool
	}
	return l.pool
}

// demand is what a lease of owner asks of the store for l.
func (l *Limit) demand(owner Owner) Demand {
	d := Demand{Pool: l.pool, Owner: owner, Max: l.max, TTL: l.ttl, Weight: l.Weight()}
	if s := l.share; s != nil {
		d.Parent, d.ParentMax, d.Share, d.Min, d.Keep = s.parent.pool, s.parent.max, s.share, s.min, s.parent.keep
	}
	return d
}

// checkSharing checks the weight and parent options of a NewLimit call
// against the rest of the limit, and sets the share's defaults.
func (l *Limit) checkSharing(share, min int, shareSet, minSet bool) error {
	if l.weight != 0 {
		switch {
		case l.weight < 1:
			return &InvalidLimitError{Field: "weight", Value: fmt.Sprint(l.weight), Reason: "must be at least 1"}
		case l.max > 0 && l.weight > l.max:
			return &InvalidLimitError{Field: "weight", Value: fmt.Sprint(l.weight), Reason: fmt.Sprintf("must be at most max (%d): no lease could ever be granted", l.max)}
		}
	}
	if l.share == nil {
		switch {
		case shareSet:
			return &InvalidLimitError{Field: "share", Value: fmt.Sprint(share), Reason: "needs a parent (WithParent)"}
		case minSet:
			return &InvalidLimitError{Field: "minimum", Value: fmt.Sprint(min), Reason: "needs a parent (WithParent)"}
		}
		return nil
	}
	p := l.share.parent
	switch {
	case p.name == "":
		return &InvalidLimitError{Field: "parent", Value: "Parent{}", Reason: "must be built with NewParent"}
	case l.max > p.max:
		return &InvalidLimitError{Field: "max", Value: fmt.Sprint(l.max), Reason: fmt.Sprintf("must be at most its parent %q's max (%d)", p.name, p.max)}
	case shareSet && share < 1:
		return &InvalidLimitError{Field: "share", Value: fmt.Sprint(share), Reason: "must be at least 1"}
	case minSet && (min < 0 || min > l.max):
		return &InvalidLimitError{Field: "minimum", Value: fmt.Sprint(min), Reason: fmt.Sprintf("must be between 0 and max (%d)", l.max)}
	}
	l.share.share, l.share.min = 1, 0
	if shareSet {
		l.share.share = share
	}
	if minSet {
		l.share.min = min
	}
	return nil
}

// Demand is one lease asked of a Sharer: a pool with a weight, a parent or
// both.
type Demand struct {
	Pool   PoolID
	Owner  Owner
	Max    int           // the pool's max, at least 1
	TTL    time.Duration // the lease's
	Weight int           // slots the lease takes, between 1 and Max

	// The parent, when Parent is not zero.
	Parent    PoolID
	ParentMax int           // at least Max
	Share     int           // the key's weight in the parent's fair share, at least 1
	Min       int           // slots up to which the key is served first
	Keep      time.Duration // on release, how long the slot is kept for the key (WithKeep)
}

// KeptFor is the owner of the slots a parent keeps for a key (WithKeep):
// a lease of the key that its next caller takes over. No caller's owner
// is ever zero.
var KeptFor = Owner{}

// HasParent reports whether the demand's pool has a parent.
func (d *Demand) HasParent() bool { return d.Parent != PoolID{} }

// Sharer is a Store that keeps weighted leases and parents (see Parent and
// WithWeight). The Limiter calls it for the limits that have a weight above
// one or a parent; the plain Store and Liner calls serve the others, and a
// pool's plain leases count one slot each beside its weighted ones.
//
// A Sharer keeps lines for its demands, as a Liner does, and notifies their
// handoffs (when it is a Notifier) on the parent's pool, whose line
// decides, for a demand with a parent. A lease of a demand with a parent is
// renewed through Renew with the Renewal's Weight and Parent set.
// Implemented by memstore, nullstore, pgstore and redisstore; storetest
// checks it.
type Sharer interface {
	// AcquireDemand is Acquire for d (t nil), or Queue (t not nil): it
	// grants d.Weight slots of d.Pool to d.Owner when its pool and its
	// parent both have room, nobody waits in the pool's line, and no
	// waiting key of the parent comes first by the fair share (see
	// Parent). A refused Queue leaves a ticket, as Liner.Queue does. One
	// round trip.
	AcquireDemand(ctx context.Context, d Demand, t *Ticket) (granted bool, ahead int, err error)

	// ReleaseDemand frees d.Owner's lease of d, and with dequeue, takes
	// its ticket out of the line too (Liner.Dequeue). The slots freed go
	// to the line; but for a demand with a parent and a Keep, when keys
	// wait, none waits in d's own line and d's key would be served first
	// if it asked again, they are kept for the key: a lease of KeptFor
	// expiring after Keep, which the key's next caller takes over (without
	// a ticket: a kept slot is its key's). It reports whether it kept
	// them: slots kept and not taken pass on at the next call on the
	// parent that finds them expired, which the Limiter makes after Keep.
	// One round trip.
	ReleaseDemand(ctx context.Context, d Demand, dequeue bool) (kept bool, err error)
}

// checkShared checks that the store can serve the limits that have a
// weight or a parent, and that no two of them share a parent.
func (l *Limiter) checkShared(limits []Limit, member bool) error {
	for i := range limits {
		lim := &limits[i]
		if lim.plain() {
			continue
		}
		if l.sharer == nil {
			return fmt.Errorf("%w: limit %q has a weight or a parent, which the store (%T) does not keep", ErrInvalidLimit, lim.name, l.store)
		}
		if member {
			return fmt.Errorf("%w: limit %q has a weight or a parent, which a member lease (AcquireAs) cannot take", ErrInvalidLimit, lim.name)
		}
		if lim.share == nil {
			continue
		}
		for _, prev := range limits[:i] {
			if prev.share != nil && prev.share.parent.pool == lim.share.parent.pool {
				return fmt.Errorf("%w: limits %q and %q of parent %q in one Acquire", ErrInvalidLimit, prev.name, lim.name, lim.share.parent.name)
			}
		}
	}
	return nil
}

// acquireIn asks the store for owner's lease of lim, once.
func (l *Limiter) acquireIn(ctx context.Context, lim *Limit, owner Owner) (bool, error) {
	if lim.plain() {
		return l.store.Acquire(ctx, lim.pool, owner, lim.max, lim.ttl)
	}
	ok, _, err := l.sharer.AcquireDemand(ctx, lim.demand(owner), nil)
	return ok, err
}

// queueIn asks the store for owner's lease of lim, or a ticket in its line.
func (l *Limiter) queueIn(ctx context.Context, lim *Limit, owner Owner, t Ticket) (bool, error) {
	if lim.plain() {
		ok, _, err := l.liner.Queue(ctx, lim.pool, owner, lim.max, lim.ttl, t)
		return ok, err
	}
	ok, _, err := l.sharer.AcquireDemand(ctx, lim.demand(owner), &t)
	return ok, err
}

// releaseIn frees owner's lease of lim, and with dequeue takes its ticket
// out of the line.
func (l *Limiter) releaseIn(ctx context.Context, lim *Limit, owner Owner, dequeue bool) error {
	switch {
	case !lim.plain():
		kept, err := l.sharer.ReleaseDemand(ctx, lim.demand(owner), dequeue)
		if kept {
			l.passOnLater(*lim)
		}
		return err
	case dequeue:
		return l.liner.Dequeue(ctx, lim.pool, owner)
	}
	return l.store.Release(ctx, lim.pool, owner)
}

// passOnLater makes, once lim's parent's Keep has passed, a call on the
// parent that passes the slot it kept on to the waiting keys if its key did
// not take it back: the waiters would otherwise find it at their next poll.
// The call releases nothing (a fresh owner holds no lease).
func (l *Limiter) passOnLater(lim Limit) {
	time.AfterFunc(lim.share.parent.keep+time.Millisecond, func() {
		if l.closed.Load() {
			return
		}
		ctx, cancel := l.bound(context.Background(), l.budgetOf(lim))
		defer cancel()
		_, _ = l.sharer.ReleaseDemand(ctx, lim.demand(NewOwner()), false)
	})
}
