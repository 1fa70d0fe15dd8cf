package keycap

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keycap/keycap/store"
)

// DefaultTTL is the lease TTL of a Spec that sets none.
const DefaultTTL = 30 * time.Second

// MinTTL and MaxTTL bound a Spec's TTL: MaxTTL is far beyond any holder's
// renewal, and far from where a clock plus a TTL would overflow.
const (
	MinTTL = time.Millisecond
	MaxTTL = store.MaxTTL
)

// DefaultBudget is the decision budget of a Limiter built without
// WithDecisionBudget: how long a store call may take before the store counts
// as failed for it and the limit's fail mode applies.
const DefaultBudget = 250 * time.Millisecond

// FailMode says what Acquire does when the store cannot answer for a limit.
// As text (YAML, flags) it is "default", "open" or "closed".
type FailMode uint8

const (
	// FailDefault defers to the Limiter's default (WithDefaultFailMode),
	// which is FailOpen unless set.
	FailDefault FailMode = iota
	// FailOpen lets the caller run without a slot for this limit.
	FailOpen
	// FailClosed refuses: Acquire returns an error that matches
	// ErrStoreUnavailable.
	FailClosed
)

var failModeNames = [...]string{FailDefault: "default", FailOpen: "open", FailClosed: "closed"}

// String returns "default", "open" or "closed".
func (m FailMode) String() string {
	if int(m) < len(failModeNames) {
		return failModeNames[m]
	}
	return fmt.Sprintf("FailMode(%d)", uint8(m))
}

// MarshalText returns the mode as String does.
func (m FailMode) MarshalText() ([]byte, error) {
	if int(m) >= len(failModeNames) {
		return nil, fmt.Errorf("keycap: invalid fail mode %d", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText reads "default", "open" or "closed" (or "" for default).
func (m *FailMode) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		*m = FailDefault
		return nil
	}
	for i, name := range failModeNames {
		if strings.EqualFold(s, name) {
			*m = FailMode(i)
			return nil
		}
	}
	return &InvalidLimitError{Field: "FailMode", Value: fmt.Sprintf("%q", s), Reason: `must be "open" or "closed" (or "default")`}
}

// Spec says how many leases each key may hold at once, and how: it is a
// limit for every key, and Spec.For makes the limit of one key. Every front
// door carries one (httplimit.Limit, joblimit.NewRule, the gateway's
// limits: in YAML), and it is checked in one place, Validate.
//
// Every field but Name has a usable zero value, said beside it.
type Spec struct {
	// Name names the limit: with the family, the set of pools it counts
	// in, one per key. Required.
	Name string
	// Max is how many leases a key may hold at once. 0 refuses every
	// caller at once, without a store call.
	Max int
	// TTL is how long a lease lives when its holder stops renewing it (a
	// crashed process). Holders renew at about a third of it, so it can be
	// short. 0: DefaultTTL; else from MinTTL to MaxTTL.
	TTL time.Duration
	// Wait is how long Acquire may wait for a slot before it refuses. A
	// waiter holds no slot and reserves nothing. 0: refuse at once.
	Wait time.Duration
	// Budget is how long each store call for the limit may take before the
	// store counts as failed and the fail mode applies. 0: the Limiter's
	// (WithDecisionBudget).
	Budget time.Duration
	// FailMode says what happens when the store cannot answer. FailDefault:
	// the Limiter's.
	FailMode FailMode
	// Family is the front door whose pools the limit counts in: FamilyApp
	// (the zero value) for an application's and httplimit's limits. Front
	// doors set their own.
	Family Family
	// Shadow makes it a shadow limit: each Acquire decides for it and
	// reports the decision (events, metrics and logs labelled shadow) but
	// never refuses, never waits, and never fails on its store, so that a
	// new cap can be watched on real traffic before it is enforced. A
	// shadow limit counts in pools of its own, apart from the enforced
	// limit of the same name and key. Its slot is decided before the
	// enforced limits' and given back when they refuse.
	Shadow bool
	// Fence gives each grant a fencing token (Lease.Fences): a number
	// above every token granted before it in the key's pool, from the
	// store, so that a system the holder writes to can refuse a holder
	// whose lease was lost once a newer holder has written (see
	// docs/safety.md). Needs a store with fencing tokens (store.Fences:
	// memstore, redisstore, pgstore); not with Shadow. A waiter handed a
	// slot claims it with one more store call, which carries the token.
	Fence bool

	// Weight is how many slots each lease takes, of the key's pool and of
	// its parent: an export that costs 3 of Max 10, a read 1. A lease of
	// weight n is granted only when n slots are free, and a waiter of
	// weight n keeps its place until they are, so heavy callers are not
	// starved by light ones. 0: 1; at most Max.
	Weight int
	// Parent is a total shared by the pools of many keys (see Parent): a
	// grant then needs room in the key's own pool and in the parent. Nil:
	// none. Max must not exceed the parent's.
	Parent *Parent
	// Share is the key's weight in its parent's fair share: a key of share
	// 3 is served as three keys of share 1. 0: 1. Needs Parent.
	Share int
	// Minimum makes the key served before any key at or above its own
	// minimum while it holds fewer than Minimum slots of its parent: with no
	// preemption, a minimum is a priority. At most Max. Needs Parent.
	Minimum int
}

// Validate reports every field of s that is not allowed, each as an
// *InvalidLimitError naming it (its Go name: "Max", "TTL", ...); errors.As
// finds the first, and the error unwraps to them all (errors.Join). It
// matches ErrInvalidLimit.
func (s Spec) Validate() error {
	var errs []error
	invalid := func(field string, value any, reason string) {
		errs = append(errs, &InvalidLimitError{Field: field, Value: fmt.Sprint(value), Reason: reason})
	}
	if s.Name == "" {
		invalid("Name", `""`, "must not be empty")
	}
	if s.Max < 0 {
		invalid("Max", s.Max, "must be at least 0")
	}
	switch {
	case s.TTL != 0 && s.TTL < MinTTL:
		invalid("TTL", s.TTL, "must be at least "+MinTTL.String()+" (or 0 for the default)")
	case s.TTL > MaxTTL:
		invalid("TTL", s.TTL, "must be at most "+MaxTTL.String())
	}
	if s.Wait < 0 {
		invalid("Wait", s.Wait, "must be at least 0")
	}
	if s.Budget < 0 {
		invalid("Budget", s.Budget, "must be positive (or 0 for the default)")
	}
	if s.FailMode > FailClosed {
		invalid("FailMode", s.FailMode, "must be default, open or closed")
	}
	if s.Fence && s.Shadow {
		invalid("Fence", s.Fence, "a shadow limit never guards anything: no token to give")
	}
	if !s.Family.valid() {
		invalid("Family", s.Family, "must be app, job, conn or pause")
	}
	switch {
	case s.Weight < 0:
		invalid("Weight", s.Weight, "must be at least 1 (or 0 for 1)")
	case s.Max > 0 && s.Weight > s.Max:
		invalid("Weight", s.Weight, fmt.Sprintf("must be at most the limit's max (%d): no lease could ever be granted", s.Max))
	}
	switch p := s.Parent; {
	case p == nil:
		if s.Share != 0 {
			invalid("Share", s.Share, "needs a parent")
		}
		if s.Minimum != 0 {
			invalid("Minimum", s.Minimum, "needs a parent")
		}
	case p.name == "":
		invalid("Parent", "Parent{}", "must be built with NewParent")
	default:
		if s.Max > p.ceiling() {
			invalid("Max", s.Max, fmt.Sprintf("must be at most its parent %q's max (%d)", p.name, p.ceiling()))
		}
		if s.Weight > p.floor() {
			invalid("Weight", s.Weight, fmt.Sprintf("must be at most its parent %q's floor (%d): no lease could be granted at it", p.name, p.floor()))
		}
		if s.Share < 0 {
			invalid("Share", s.Share, "must be at least 1 (or 0 for 1)")
		}
		if s.Minimum < 0 || s.Minimum > max(s.Max, 0) {
			invalid("Minimum", s.Minimum, fmt.Sprintf("must be between 0 and the limit's max (%d)", s.Max))
		}
	}
	return errors.Join(errs...)
}

// For returns the limit of key under s: at most s.Max leases at once in the
// pool (s.Family, s.Name, key). Keys may be any bytes, the empty string
// included. An invalid s makes a limit that Acquire refuses with the error
// Validate returns; call Validate when s is built to find it sooner.
func (s Spec) For(key string) Limit {
	l := Limit{spec: s, key: key, ttlSet: s.TTL != 0}
	if s.Validate() != nil {
		l.invalid = true
		return l
	}
	if l.spec.TTL == 0 {
		l.spec.TTL = DefaultTTL
	}
	l.spec.Weight = max(l.spec.Weight, 1)
	if l.spec.Parent != nil {
		l.spec.Share = max(l.spec.Share, 1)
	}
	l.pool = store.PoolOf(byte(l.poolFamily()), s.Name, key)
	if s.Shadow && s.Parent != nil {
		l.makeShadow() // its parent's pool is the shadow's too
	}
	l.share()
	return l
}

// Limit caps one pool: at most Max leases at once for (Family, Name, Key).
// It is an immutable value made by Spec.For; the zero Limit is invalid, and
// Acquire refuses it.
type Limit struct {
	spec    Spec // with the defaults set: TTL, Weight, Share
	key     string
	pool    store.PoolID
	shared  *store.Shared // what its demands add: nil for a plain limit
	ttlSet  bool          // the spec set a TTL: a member lease keeps it
	invalid bool          // the spec is invalid: Acquire returns what Validate says
}

// Spec returns the limit's spec, its defaults filled in (TTL, Weight, and
// Share with a parent).
func (l Limit) Spec() Spec { return l.spec }

// Family returns the family of the limit's pools.
func (l Limit) Family() Family { return l.spec.Family }

// Name returns the limit's name.
func (l Limit) Name() string { return l.spec.Name }

// Key returns the key the limit counts against, as given.
func (l Limit) Key() string { return l.key }

// Max returns how many leases the pool may hold at once.
func (l Limit) Max() int { return l.spec.Max }

// Shadow reports whether the limit is a shadow limit (Spec.Shadow).
func (l Limit) Shadow() bool { return l.spec.Shadow }

// Pool returns the identity of the limit's pool as stores see it.
func (l Limit) Pool() store.PoolID { return l.pool }

// String describes the limit without its key, which may be long or private.
func (l Limit) String() string {
	s := fmt.Sprintf("%s (max %d)", l.spec.Name, l.spec.Max)
	if p := l.spec.Parent; p != nil {
		s = fmt.Sprintf("%s (max %d, parent %s max %d)", l.spec.Name, l.spec.Max, p.name, p.max)
	}
	if l.spec.Shadow {
		s += " (shadow)"
	}
	return s
}

// valid reports whether l was made by For from a valid spec.
func (l *Limit) valid() bool { return l.spec.Name != "" && !l.invalid }

// shadowFamily marks the family byte of a shadow limit's pools, so that
// they are never an enforced limit's.
const shadowFamily = Family(store.Shadow)

// poolFamily is the family the limit's pools are hashed in: its own, or
// its shadow.
func (l *Limit) poolFamily() Family {
	if l.spec.Shadow {
		return l.spec.Family | shadowFamily
	}
	return l.spec.Family
}

// makeShadow makes l a shadow limit (WithShadowMode): its pool, and its
// parent's, are the shadow family's.
func (l *Limit) makeShadow() {
	l.spec.Shadow, l.spec.Fence = true, false // a shadow guards nothing: no token
	l.pool = store.PoolOf(byte(l.poolFamily()), l.spec.Name, l.key)
	if p := l.spec.Parent; p != nil {
		sp := *p
		sp.pool = store.PoolOf(store.Internal|store.Shadow, "parent", sp.name)
		// A shadow's parent counts at its max: the adaptive total is the
		// enforced parent's, tuned by the work it admits, not by a copy.
		sp.adaptive = nil
		l.spec.Parent = &sp
		l.share()
	}
}

// plain reports whether the limit takes one slot and has no parent.
func (l *Limit) plain() bool { return l.spec.Weight <= 1 && l.spec.Parent == nil }

// home is the pool that decides for the limit, whose handoffs wake its
// waiters and whose part of the store holds it: its parent's when it has
// one.
func (l *Limit) home() store.PoolID {
	if p := l.spec.Parent; p != nil {
		return p.pool
	}
	return l.pool
}

// demand is what a lease asks of the store for l.
func (l *Limit) demand() store.Demand {
	return store.Demand{Max: l.spec.Max, TTL: l.spec.TTL, Shared: l.shared}
}

// share sets what l's demands add to a plain slot (store.Shared): built
// once per limit, so that a demand stays small and a take allocates
// nothing. Called whenever the spec's weight, parent, share or minimum is
// set or changed.
func (l *Limit) share() {
	if l.plain() {
		l.shared = nil
		return
	}
	sh := &store.Shared{Weight: l.spec.Weight}
	if p := l.spec.Parent; p != nil {
		sh.Parent = store.Parent{Pool: p.pool, Max: p.max, Share: l.spec.Share, Min: l.spec.Minimum, Keep: p.keep}
	}
	l.shared = sh
}
