package joblimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/keycap/keycap"
)

// Defaults of a Rule, where its spec leaves a field zero.
const (
	DefaultReleaseAfter = 10 * time.Second // how long a job with no slot waits before its next try
	DefaultTTL          = 70 * time.Second // slot TTL when the job's timeout is unknown
	TTLMargin           = 10 * time.Second // added to a known job timeout to make the slot TTL

	// DefaultWaitInPlace is how long a job with no free slot waits for one
	// in the pool's line, holding its worker, before it goes back to the
	// queue: a slot freed meanwhile, on any server, is handed to it at once.
	// At most half of the time the job's context has left.
	DefaultWaitInPlace = 5 * time.Second

	// DefaultParkFor is how long a job that went back to the queue keeps
	// its ticket in the line (parked) when the adapter can wake it: a slot
	// freed on any server is handed to it and the job made runnable at
	// once; a wake-up that was lost brings it back after this long anyway.
	DefaultParkFor = time.Minute

	// JobClaim is how long a slot handed to a parked job stays reserved
	// while the queue makes it runnable and a worker fetches it; unclaimed,
	// it passes to the next job in line.
	JobClaim = 10 * time.Second

	// DefaultBudget is a job's decision budget: how long the store may take
	// to decide on its slot before the rule's fail mode applies. Longer than
	// the Limiter's default for requests: a job that waits a second longer
	// costs nobody, and a slow store should not run jobs uncapped.
	DefaultBudget = 2 * time.Second
)

// Rule lets at most Spec.Max jobs run at once per key. Build it with
// NewRule.
type Rule struct {
	spec         keycap.Spec
	key          string
	releaseAfter time.Duration
	releaseAt    time.Time
	jitter       time.Duration
	jitterSet    bool
	skip         bool
	shared       bool
	prefix       string
	deadline     time.Duration
	waitInPlace  time.Duration
	parkFor      time.Duration
	noHandoff    bool
}

// An Option sets an optional field of a Rule.
type Option struct{ apply func(*Rule) }

// WithReleaseAfter sets how long a job that finds no free slot waits in the
// queue before its next try. Default DefaultReleaseAfter, plus jitter.
func WithReleaseAfter(d time.Duration) Option {
	return Option{func(r *Rule) { r.releaseAfter, r.releaseAt = d, time.Time{} }}
}

// WithReleaseAt releases a job that finds no free slot until t (no jitter is
// added unless WithJitter says so).
func WithReleaseAt(t time.Time) Option {
	return Option{func(r *Rule) { r.releaseAt = t }}
}

// WithJitter adds a random delay from 0 to d to each release, so that jobs
// refused together do not come back together. Default: half the release
// delay, none with WithReleaseAt.
func WithJitter(d time.Duration) Option {
	return Option{func(r *Rule) { r.jitter, r.jitterSet = d, true }}
}

// WithSkip drops a job that finds no free slot instead of releasing it: River
// cancels it, asynq revokes it. An explicit opt-in; skipped jobs are reported
// as refusals (keycap.LimitExceeded).
func WithSkip() Option { return Option{func(r *Rule) { r.skip = true }} }

// WithSharedPool counts every job kind that uses the same key (and prefix) in
// one pool, named "job". By default each kind has its own pools, named
// "job:<kind>".
func WithSharedPool() Option { return Option{func(r *Rule) { r.shared = true }} }

// WithPrefix puts prefix before the key, to tell pools apart.
func WithPrefix(prefix string) Option { return Option{func(r *Rule) { r.prefix = prefix }} }

// WithDeadline bounds how long a job may keep waiting for a slot, counted
// from the first time it found none. Past it, the job fails with an error
// matching jobtype.ErrDeadline, through the queue's normal failure path. The
// store must keep marks (store.Marks). The wait
// itself never spends the job's attempts, so the deadline, not a count, bounds
// it; real errors keep counting against the queue's retry limit. 0 (the
// default) waits without bound.
func WithDeadline(d time.Duration) Option { return Option{func(r *Rule) { r.deadline = d }} }

// WithWaitInPlace sets how long a job with no free slot waits for one in
// the pool's line, holding its worker, before it goes back to the queue
// (default DefaultWaitInPlace; at most half of what the job's context has
// left). 0 sends it back at once: a worker never waits, and a job that the
// adapter can wake is parked instead.
func WithWaitInPlace(d time.Duration) Option {
	return Option{func(r *Rule) { r.waitInPlace = d }}
}

// WithParkFor sets how long a parked job waits in the queue before it comes
// back anyway, should its wake-up be lost (default DefaultParkFor).
func WithParkFor(d time.Duration) Option { return Option{func(r *Rule) { r.parkFor = d }} }

// WithoutHandoff turns parking off: a job that goes back to the queue
// leaves the line and comes back after the release delay (WithReleaseAfter),
// as keycap did before lines. Waiting in place still applies.
func WithoutHandoff() Option { return Option{func(r *Rule) { r.noHandoff = true }} }

// NewRule returns a rule letting at most spec.Max jobs run at once per key
// (0 refuses every job). The spec is keycap's, checked as everywhere else
// (keycap.Spec.Validate), with what a job front door decides for itself:
//   - Name: the pool's name, the same for every job kind; empty, each kind
//     has its own, "job:<kind>" ("job" with WithSharedPool).
//   - Family: keycap.FamilyJob, always; leave it zero.
//   - TTL: how soon the slot of a job whose worker died frees itself; 0,
//     the job's timeout plus TTLMargin, or DefaultTTL when the timeout is
//     unknown. A running job's slot is renewed, so a job that runs longer
//     never loses it.
//   - Wait: leave it zero; a job's wait in place is WithWaitInPlace, whose
//     default is not zero.
//   - Budget: 0 is DefaultBudget, not the Limiter's: a job that waits a
//     second longer costs nobody, and a slow store should not run jobs
//     uncapped.
//   - FailMode: FailOpen runs the job without a slot, FailClosed releases
//     it (or skips it, with WithSkip) as when no slot is free; FailDefault,
//     the Limiter's.
//
// An invalid setting returns a *keycap.InvalidLimitError naming it.
func NewRule(key string, spec keycap.Spec, opts ...Option) (Rule, error) {
	r := Rule{spec: spec, key: key, releaseAfter: DefaultReleaseAfter, waitInPlace: DefaultWaitInPlace, parkFor: DefaultParkFor}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&r)
		}
	}
	invalid := func(field, value, reason string) error {
		return &keycap.InvalidLimitError{Field: field, Value: value, Reason: reason}
	}
	switch {
	case spec.Family != keycap.FamilyApp && spec.Family != keycap.FamilyJob:
		return Rule{}, invalid("Family", spec.Family.String(), "is the job family's: leave it zero")
	case spec.Wait != 0:
		return Rule{}, invalid("Wait", spec.Wait.String(), "leave it zero: a job's wait in place is joblimit.WithWaitInPlace")
	case r.releaseAfter < 0:
		return Rule{}, invalid("release after", r.releaseAfter.String(), "must be at least 0")
	case !r.releaseAt.IsZero() && !r.releaseAt.After(time.Now()):
		return Rule{}, invalid("release at", r.releaseAt.Format(time.RFC3339), "must be in the future")
	case r.jitter < 0:
		return Rule{}, invalid("jitter", r.jitter.String(), "must be at least 0")
	case r.deadline < 0:
		return Rule{}, invalid("deadline", r.deadline.String(), "must be at least 0")
	case r.waitInPlace < 0:
		return Rule{}, invalid("wait in place", r.waitInPlace.String(), "must be at least 0")
	case r.parkFor <= 0:
		return Rule{}, invalid("park for", r.parkFor.String(), "must be positive")
	}
	r.spec.Family = keycap.FamilyJob
	if r.spec.Budget == 0 {
		r.spec.Budget = DefaultBudget
	}
	check := r.spec
	if check.Name == "" {
		check.Name = "job"
	}
	if err := check.Validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// MustRule is like NewRule but panics on an invalid setting.
func MustRule(key string, spec keycap.Spec, opts ...Option) Rule {
	r, err := NewRule(key, spec, opts...)
	if err != nil {
		panic(err)
	}
	return r
}

// Pool returns the name of the pool a job of kind counts in: the spec's
// Name, or "job:<kind>", or "job" for a shared rule.
func (r Rule) Pool(kind string) string {
	switch {
	case r.spec.Name != "":
		return r.spec.Name
	case r.shared:
		return "job"
	}
	return "job:" + kind
}

// Key returns the key jobs count against: the prefix and the key.
func (r Rule) Key() string { return r.prefix + r.key }

// Spec returns the rule's spec.
func (r Rule) Spec() keycap.Spec { return r.spec }

// Max returns how many jobs may run at once per key.
func (r Rule) Max() int { return r.spec.Max }

// Deadline returns how long a job may keep waiting for a slot; 0: no bound.
func (r Rule) Deadline() time.Duration { return r.deadline }

// slotTTL returns the TTL of a slot for a job that may run for timeout.
func (r Rule) slotTTL(timeout time.Duration) time.Duration {
	switch {
	case r.spec.TTL > 0:
		return r.spec.TTL
	case timeout > 0:
		return timeout + TTLMargin
	}
	return DefaultTTL
}

// inPlace returns how long a job may wait for a slot holding its worker.
func (r Rule) inPlace(ctx context.Context) time.Duration {
	d := r.waitInPlace
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)/2)
	}
	if r.skip || d <= 0 {
		return 0
	}
	return d
}

// delay returns how long a refused job waits before its next try.
func (r Rule) delay() time.Duration {
	d, jitter := r.releaseAfter, r.releaseAfter/2
	if !r.releaseAt.IsZero() {
		d, jitter = max(time.Until(r.releaseAt), 0), 0
	}
	if r.jitterSet {
		jitter = r.jitter
	}
	if jitter > 0 {
		d += rand.N(jitter + 1)
	}
	return d
}

// String describes the rule without its key.
func (r Rule) String() string {
	return fmt.Sprintf("at most %d at once per key", r.spec.Max)
}
