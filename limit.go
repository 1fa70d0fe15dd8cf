package keycap

import (
	"fmt"
	"time"
)

// DefaultTTL is the lease TTL of a Limit built without WithTTL.
const DefaultTTL = 30 * time.Second

// MinTTL is the shortest TTL a Limit accepts.
const MinTTL = time.Millisecond

// MaxTTL is the longest TTL a Limit accepts: far beyond any holder's
// renewal, and far from where a clock plus a TTL would overflow.
const MaxTTL = 10 * 365 * 24 * time.Hour

// DefaultBudget is the decision budget of a Limiter built without
// WithDecisionBudget: how long a store call may take before the store counts
// as failed for it and the limit's fail mode applies.
const DefaultBudget = 250 * time.Millisecond

// FailMode says what Acquire does when the store cannot answer for a limit.
type FailMode uint8

const (
	// FailDefault defers to the Limiter's default (WithDefaultFailMode), which
	// is FailOpen unless set.
	FailDefault FailMode = iota
	// FailOpen lets the caller run without a slot for this limit.
	FailOpen
	// FailClosed refuses: Acquire returns an error that matches
	// ErrStoreUnavailable.
	FailClosed
)

// String returns "default", "open" or "closed".
func (m FailMode) String() string {
	switch m {
	case FailDefault:
		return "default"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailMode(%d)", uint8(m))
}

// Limit caps one pool: at most Max leases at once for (Family, Name, Key).
//
// A Limit is an immutable value built by NewLimit, which checks every field.
// The zero Limit is invalid, and Acquire refuses it.
type Limit struct {
	name   string
	key    string
	max    int
	ttl    time.Duration
	wait   time.Duration
	budget time.Duration // 0: the Limiter's
	pool   PoolID
	family Family
	fail   FailMode
	ttlSet bool     // WithTTL given: AcquireAs keeps it
	shadow bool     // decides and reports, never refuses (WithShadow)
	weight int      // slots a lease takes; 0: one (WithWeight not given)
	share  *sharing // the parent, nil when none
}

// A LimitOption sets an optional field of a Limit. (It is a value, not a
// function, so that building a limit costs no allocation.)
type LimitOption struct {
	field limitField
	d     time.Duration
	m     FailMode
	f     Family
	n     int
	p     *Parent
}

type limitField uint8

const (
	fieldTTL limitField = iota + 1
	fieldWait
	fieldFail
	fieldBudget
	fieldFamily
	fieldWeight
	fieldParent
	fieldShare
	fieldMin
	fieldShadow
)

// WithShadow makes the limit a shadow limit: each Acquire decides for it
// and reports the decision (SlotAcquired, LimitExceeded, metrics and logs
// labelled shadow) but never refuses, never waits, and never fails on its
// store, so that a new cap can be watched on real traffic before it is
// enforced. A shadow limit counts in pools of its own, apart from the
// enforced limit of the same name and key: a candidate cap beside the
// current one on the same requests works. Its slot is decided before the
// enforced limits' and given back at once when they refuse, so it sees
// every request the enforced limits see, and holds a slot only for those
// that run (and that it would have admitted).
func WithShadow() LimitOption { return LimitOption{field: fieldShadow} }

// WithTTL sets how long a lease lives when its holder stops renewing it (a
// crashed process, a lost network). Holders renew at about a third of it, so a
// TTL can be short. Default DefaultTTL (for a member lease, taken with
// Limiter.AcquireAs, MemberTTLBeats heartbeats); from MinTTL to MaxTTL.
func WithTTL(ttl time.Duration) LimitOption { return LimitOption{field: fieldTTL, d: ttl} }

// WithWait lets Acquire wait up to d for a slot of this limit before it
// refuses. A waiter holds no slot and reserves nothing. Default 0: refuse at
// once. Not negative.
func WithWait(d time.Duration) LimitOption { return LimitOption{field: fieldWait, d: d} }

// WithBudget sets this limit's decision budget: how long each store call for
// it may take before the store counts as failed and the fail mode applies at
// once. Default: the Limiter's (WithDecisionBudget). Positive.
func WithBudget(d time.Duration) LimitOption { return LimitOption{field: fieldBudget, d: d} }

// WithFamily puts the limit in family f instead of FamilyApp. Front doors
// use it for their pools (joblimit FamilyJob, conncap FamilyConn); an
// application's own limits need it only to share a front door's pools on
// purpose.
func WithFamily(f Family) LimitOption { return LimitOption{field: fieldFamily, f: f} }

// WithFailMode sets what happens when the store cannot answer for this limit.
// Default FailDefault, which defers to the Limiter.
func WithFailMode(m FailMode) LimitOption { return LimitOption{field: fieldFail, m: m} }

// NewLimit returns a limit of max concurrent leases for key in the pool family
// name. name must not be empty; key may be any bytes, the empty string
// included. max may be 0, which refuses every Acquire at once. An invalid
// value returns an *InvalidLimitError naming the field.
func NewLimit(name, key string, max int, opts ...LimitOption) (Limit, error) {
	l := Limit{name: name, key: key, max: max, ttl: DefaultTTL}
	var share, min int
	var shareSet, minSet bool
	for _, o := range opts {
		switch o.field {
		case fieldTTL:
			l.ttl, l.ttlSet = o.d, true
		case fieldWait:
			l.wait = o.d
		case fieldFail:
			l.fail = o.m
		case fieldBudget:
			l.budget = o.d
			if o.d <= 0 {
				return Limit{}, &InvalidLimitError{Field: "budget", Value: o.d.String(), Reason: "must be positive"}
			}
		case fieldFamily:
			l.family = o.f
			if !o.f.valid() {
				return Limit{}, &InvalidLimitError{Field: "family", Value: o.f.String(), Reason: "must be FamilyApp, FamilyJob, FamilyConn or FamilyPause"}
			}
		case fieldWeight:
			l.weight = o.n
			if o.n < 1 {
				return Limit{}, &InvalidLimitError{Field: "weight", Value: fmt.Sprint(o.n), Reason: "must be at least 1"}
			}
		case fieldParent:
			l.share = &sharing{parent: *o.p}
		case fieldShare:
			share, shareSet = o.n, true
		case fieldMin:
			min, minSet = o.n, true
		case fieldShadow:
			l.shadow = true
		}
	}
	if err := l.validate(); err != nil {
		return Limit{}, err
	}
	if err := l.checkSharing(share, min, shareSet, minSet); err != nil {
		return Limit{}, err
	}
	l.pool = PoolIDOf(l.family, name, key)
	if l.shadow {
		l.makeShadow()
	}
	return l, nil
}

// makeShadow makes l a shadow limit: its pool, and its parent's, are the
// shadow family's, so that it never takes a slot an enforced limit counts.
func (l *Limit) makeShadow() {
	l.shadow = true
	l.pool = PoolIDOf(l.poolFamily(), l.name, l.key)
	if l.share != nil {
		s := *l.share
		s.parent.pool = PoolIDOf(familyInternal|shadowFamily, "parent", s.parent.name)
		l.share = &s
	}
}

// shadowFamily marks the family byte of a shadow limit's pools, so that
// they are never an enforced limit's.
const shadowFamily Family = 0x80

// poolFamily is the family the limit's pools are hashed in: its own, or
// its shadow.
func (l *Limit) poolFamily() Family {
	if l.shadow {
		return l.family | shadowFamily
	}
	return l.family
}

// Shadow reports whether the limit is a shadow limit (WithShadow).
func (l Limit) Shadow() bool { return l.shadow }

// Tag returns the tag of the limit's pools: what an Inspector finds them by.
func (l Limit) Tag() Tag { return l.pool.Tag() }

// MustLimit is like NewLimit but panics on an invalid limit. It suits limits
// built from constants.
func MustLimit(name, key string, max int, opts ...LimitOption) Limit {
	l, err := NewLimit(name, key, max, opts...)
	if err != nil {
		panic(err)
	}
	return l
}

func (l *Limit) validate() error {
	switch {
	case l.name == "":
		return &InvalidLimitError{Field: "name", Value: `""`, Reason: "must not be empty"}
	case l.max < 0:
		return &InvalidLimitError{Field: "max", Value: fmt.Sprint(l.max), Reason: "must be at least 0"}
	case l.ttl < MinTTL:
		return &InvalidLimitError{Field: "ttl", Value: l.ttl.String(), Reason: "must be at least " + MinTTL.String()}
	case l.ttl > MaxTTL:
		return &InvalidLimitError{Field: "ttl", Value: l.ttl.String(), Reason: "must be at most " + MaxTTL.String()}
	case l.wait < 0:
		return &InvalidLimitError{Field: "wait", Value: l.wait.String(), Reason: "must be at least 0"}
	case l.fail > FailClosed:
		return &InvalidLimitError{Field: "fail mode", Value: l.fail.String(), Reason: "must be FailDefault, FailOpen or FailClosed"}
	}
	return nil
}

// valid reports whether l was built by NewLimit.
func (l Limit) valid() bool { return l.name != "" }

// Family returns the limit's family: the front door whose pools it counts in.
func (l Limit) Family() Family { return l.family }

// Name returns the limit's name: with the family, the set of pools it
// belongs to, one per key.
func (l Limit) Name() string { return l.name }

// Key returns the key the limit counts against, as given.
func (l Limit) Key() string { return l.key }

// Max returns the number of leases the pool may hold at once.
func (l Limit) Max() int { return l.max }

// TTL returns how long a lease lives without renewal.
func (l Limit) TTL() time.Duration { return l.ttl }

// Wait returns how long Acquire may wait for a slot of this limit.
func (l Limit) Wait() time.Duration { return l.wait }

// Budget returns the limit's own decision budget, 0 when it has none.
func (l Limit) Budget() time.Duration { return l.budget }

// FailMode returns the limit's own fail mode, FailDefault when it has none.
func (l Limit) FailMode() FailMode { return l.fail }

// Pool returns the identity of the pool (Name, Key) as stores see it.
func (l Limit) Pool() PoolID { return l.pool }

// String describes the limit without its key, which may be long or private.
func (l Limit) String() string {
	if l.shadow {
		c := l
		c.shadow = false
		return c.String() + " (shadow)"
	}
	if l.share != nil {
		return fmt.Sprintf("%s (max %d, parent %s max %d)", l.name, l.max, l.share.parent.name, l.share.parent.max)
	}
	return fmt.Sprintf("%s (max %d)", l.name, l.max)
}
