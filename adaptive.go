package keycap

import (
	"fmt"
	"math"
	"time"
)

// Adaptive makes a parent's total follow what the backend it guards can
// take (WithAdaptive): instead of a number someone guessed, the total
// moves between Floor and Ceiling, once per Interval, from what the work
// reports on every process — the latency of the leases released, and the
// overload signals (Lease.Overloaded: a timeout, a 429, 503 or 529,
// RESOURCE_EXHAUSTED). It starts from the parent's max.
//
// The rule (docs/architecture.md, "Adaptive totals"): overload signals on
// at least 1 % of the work cut the total to 9/10; a mean latency (less
// two standard errors) above Tolerance × the no-load latency (the lowest
// seen), or above half that tolerance with the total full, cuts it to
// 9/10 of the capacity it estimates (the larger of Little's law, slots in
// flight × no-load ÷ mean, and throughput × no-load), by half at most;
// work in flight that fills at least 80 % of the total grows it by a
// tenth, and after a cut straight back to the capacity met, then a slot
// at a time; anything else — no samples, demand below the total — holds
// it.
//
// Besides the agreed total, each process cuts what it alone enforces at
// once, until the agreed total catches up: on an overload signal, and
// when its own last 16 completions are past the tolerance.
//
// The total is one value in the store, agreed by every process: each
// process reports its samples of an interval to the store, and the first
// to decide an interval from every report writes the next total (the
// store keeps one per version); the others read it. The keys of the parent
// share whatever the total is, through their shares, minimums and
// borrowing, so adaptation never breaks fairness; a key's own Max stays
// as it is. It needs a store with store.Totals (memstore, pgstore, redisstore).
type Adaptive struct {
	// Floor and Ceiling bound the total: 1 ≤ Floor ≤ the parent's max ≤
	// Ceiling. A limit's Weight must be at most Floor, and its Max at most
	// Ceiling.
	Floor, Ceiling int
	// Interval is how often the total may move (0: DefaultInterval). At
	// least 10ms; it should see a few dozen pieces of work end.
	Interval time.Duration
	// Tolerance is the mean latency, as a multiple of the no-load latency,
	// past which the backend counts as queueing (0: DefaultTolerance).
	// Above 1.
	Tolerance float64
	// OverloadsOnly moves the total on overloads alone — cut on each,
	// grown while work fills it (AIMD) — and never on latency, so
	// Tolerance is not read. For a vendor that answers 429 at its
	// concurrency limit, whose latency says little of it, and for callers
	// whose own machine stretches the latency they measure.
	OverloadsOnly bool
	// Shadow computes and reports the total (events, Limiter.Tuning) but
	// never enforces it: the parent keeps its max, so that an operator sees
	// what the total would do before trusting it. A total in shadow sees
	// the work the fixed max lets through, so it cannot read demand above
	// that max.
	Shadow bool
}

// The defaults of Adaptive.
const (
	DefaultInterval  = 250 * time.Millisecond
	DefaultTolerance = 1.25
)

// WithAdaptive makes the parent's total adaptive (see Adaptive).
func WithAdaptive(a Adaptive) ParentOption {
	return ParentOption{func(p *Parent) { p.adaptive = &a }}
}

// check validates a against the parent's max and sets its defaults.
func (a *Adaptive) check(start int) error {
	if a.Interval == 0 {
		a.Interval = DefaultInterval
	}
	if a.Tolerance == 0 {
		a.Tolerance = DefaultTolerance
	}
	bad := func(field string, value any, reason string) error {
		return &InvalidLimitError{Field: "parent adaptive " + field, Value: fmt.Sprint(value), Reason: reason}
	}
	switch {
	case a.Floor < 1:
		return bad("floor", a.Floor, "must be at least 1")
	case a.Ceiling < a.Floor:
		return bad("ceiling", a.Ceiling, fmt.Sprintf("must be at least the floor (%d)", a.Floor))
	case start < a.Floor || start > a.Ceiling:
		return bad("floor", a.Floor, fmt.Sprintf("the parent's max (%d), where the total starts, must be between the floor and the ceiling (%d)", start, a.Ceiling))
	case a.Interval < 10*time.Millisecond:
		return bad("interval", a.Interval, "must be at least 10ms (or 0 for the default)")
	case !(a.Tolerance > 1) || math.IsInf(a.Tolerance, 0):
		return bad("tolerance", a.Tolerance, "must be above 1 (or 0 for the default)")
	}
	return nil
}

// OverloadStatus reports whether an HTTP status says the backend cannot
// take more now: an overload signal for an adaptive parent
// (Lease.Overloaded). 429 Too Many Requests, 503 Service Unavailable, 504
// Gateway Timeout (a proxy's upstream did not answer in time) and 529 (an
// API's "overloaded"). The one rule of pause.Transport, the gateway's
// upstreams and caddykeycap; rpclimit.Overload is gRPC's.
func OverloadStatus(code int) bool {
	switch code {
	case 429, 503, 504, 529:
		return true
	}
	return false
}
