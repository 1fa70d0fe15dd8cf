package keycap

import (
	"fmt"
	"time"

	"github.com/keycap/keycap/store"
)

// Parent is a total shared by the pools of many keys: "at most 50 exports
// at once in all, at most 10 per tenant". A Spec names it (Spec.Parent); a
// grant then needs room in the key's own pool and in the parent.
//
// While nobody waits, a key may use the parent's idle capacity up to its
// own max (it borrows). When keys wait, each slot that frees in the parent
// goes to the waiting key that is furthest below its fair share: first the
// keys below their minimum (Spec.Minimum), then the key that holds the
// fewest slots for its share (Spec.Share), the oldest waiter on a tie. So
// freed slots are split among waiting keys in proportion to their shares;
// nobody is preempted. Within a key, waiters are served in arrival order.
//
// A Parent is immutable, built by NewParent. Its pool does not depend on a
// family: limits of any front door that name the same parent share its
// total.
type Parent struct {
	name     string
	max      int
	keep     time.Duration
	pool     store.PoolID
	adaptive *Adaptive // WithAdaptive; nil: a fixed total
}

// DefaultKeep is how long a parent keeps a freed slot for its key when
// WithKeep does not say.
const DefaultKeep = 5 * time.Millisecond

// A ParentOption sets an optional field of a Parent.
type ParentOption struct{ apply func(*Parent) }

// WithKeep sets how long a slot freed by a key that would be served first
// if it asked again is kept for that key while other keys wait (default
// DefaultKeep; 0 turns it off). Without it, a light key whose callers come
// straight back loses each slot it frees to the busiest waiting key, and
// then waits for the next slot to free, up to a whole job; with it, the
// key's next caller takes its slot back. A slot kept and not taken passes
// on when the time is up. Not negative.
func WithKeep(d time.Duration) ParentOption {
	return ParentOption{func(p *Parent) { p.keep = d }}
}

// NewParent returns a parent of max slots named name. name must not be
// empty; max is at least 1. An invalid value returns an *InvalidLimitError
// naming the field.
func NewParent(name string, max int, opts ...ParentOption) (*Parent, error) {
	p := &Parent{name: name, max: max, keep: DefaultKeep, pool: store.PoolOf(store.Internal, "parent", name)}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(p)
		}
	}
	switch {
	case name == "":
		return nil, &InvalidLimitError{Field: "parent name", Value: `""`, Reason: "must not be empty"}
	case max < 1:
		return nil, &InvalidLimitError{Field: "parent max", Value: fmt.Sprint(max), Reason: "must be at least 1"}
	case p.keep < 0:
		return nil, &InvalidLimitError{Field: "parent keep", Value: p.keep.String(), Reason: "must be at least 0"}
	}
	if p.adaptive != nil {
		if err := p.adaptive.check(max); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// MustParent is like NewParent but panics on an invalid parent.
func MustParent(name string, max int, opts ...ParentOption) *Parent {
	p, err := NewParent(name, max, opts...)
	if err != nil {
		panic(err)
	}
	return p
}

// Name returns the parent's name.
func (p *Parent) Name() string { return p.name }

// Max returns the slots the parent's keys may hold at once in all; for an
// adaptive parent, the total it starts from (and keeps, in shadow).
func (p *Parent) Max() int { return p.max }

// Adaptive returns the parent's adaptive total (WithAdaptive), with its
// defaults set, and whether it has one.
func (p *Parent) Adaptive() (Adaptive, bool) {
	if p.adaptive == nil {
		return Adaptive{}, false
	}
	return *p.adaptive, true
}

// ceiling is the most slots the parent can ever hold at once.
func (p *Parent) ceiling() int {
	if p.adaptive != nil && !p.adaptive.Shadow {
		return max(p.max, p.adaptive.Ceiling)
	}
	return p.max
}

// floor is the fewest slots the parent can hold at once.
func (p *Parent) floor() int {
	if p.adaptive != nil && !p.adaptive.Shadow {
		return min(p.max, p.adaptive.Floor)
	}
	return p.max
}

// Keep returns how long a freed slot is kept for its key (WithKeep).
func (p *Parent) Keep() time.Duration { return p.keep }

// Pool returns the identity of the parent's pool as stores see it.
func (p *Parent) Pool() store.PoolID { return p.pool }
