package keycap

import (
	"errors"
	"fmt"
	"time"

	"github.com/keycap/keycap/store"
)

var (
	// ErrLimitExceeded matches the error Acquire returns when a limit has no
	// free slot. Its details are in a *LimitError.
	ErrLimitExceeded = errors.New("keycap: limit exceeded")

	// ErrStoreUnavailable matches the error Acquire returns when the store
	// failed for a limit that fails closed. Its details are in a *StoreError.
	ErrStoreUnavailable = errors.New("keycap: store unavailable")

	// ErrInvalidLimit matches every error about a limit that is wrong in
	// itself (an *InvalidLimitError) or used wrongly (two limits on one pool
	// in one Acquire, a zero Limit).
	ErrInvalidLimit = errors.New("keycap: invalid limit")

	// ErrClosed is returned by Acquire on a Limiter that was closed.
	ErrClosed = errors.New("keycap: limiter closed")

	// ErrNotSupported matches the error of a call that needs what the
	// store does not do: a weight or a parent on a store without shares,
	// an inspection or an override on a store that keeps none. Its details
	// are in a *store.NotSupportedError, which names the feature.
	ErrNotSupported = store.ErrNotSupported
)

// LimitError reports the limit that refused a slot, and how long Acquire
// waited before it gave up. It matches ErrLimitExceeded.
type LimitError struct {
	Limit  Limit
	Waited time.Duration
	// Parked: the caller keeps its ticket in the limit's line
	// (frontdoor.AcquireOrPark); its Parking.Wake is called when a slot is
	// handed to it.
	Parked bool
}

func (e *LimitError) Error() string {
	if e.Waited > 0 {
		return fmt.Sprintf("keycap: limit exceeded: %s, after waiting %s", e.Limit, e.Waited.Round(time.Millisecond))
	}
	return fmt.Sprintf("keycap: limit exceeded: %s", e.Limit)
}

// Is makes errors.Is(err, ErrLimitExceeded) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimitExceeded }

// StoreError reports a store failure for a limit that fails closed. It
// matches ErrStoreUnavailable and unwraps to the store's own error.
type StoreError struct {
	Limit Limit
	Err   error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("keycap: store unavailable for %s: %v", e.Limit, e.Err)
}

// Is makes errors.Is(err, ErrStoreUnavailable) true.
func (e *StoreError) Is(target error) bool { return target == ErrStoreUnavailable }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// InvalidLimitError names the field of a limit, or of a setting built on one,
// whose value is not allowed. It matches ErrInvalidLimit.
type InvalidLimitError struct {
	Field  string // the field: a Spec's Go name ("Max", "TTL", ...), or a setting's words
	Value  string // the value given, formatted
	Reason string // what the value must be
}

func (e *InvalidLimitError) Error() string {
	return fmt.Sprintf("keycap: invalid %s %s: %s", e.Field, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidLimit) true.
func (e *InvalidLimitError) Is(target error) bool { return target == ErrInvalidLimit }

// BudgetError is a store call that did not answer within its decision
// budget. The limit's fail mode applies, whoever took the time: a
// fail-closed limit's *StoreError wraps it. Who did decides how it is
// reported: as a store failure (StoreFailed, once per outage) when the
// store had the call, unanswered, for at least half of the budget while
// this process was running; otherwise as ProcessOverloaded (no outage):
// the call waited in this process to be sent, or the process did not run
// on time (CPU starvation). Overloaded says which.
type BudgetError struct {
	Budget time.Duration
	Err    error // what the store returned when its deadline passed

	// Waited is how long the caller waited: the budget, and however late
	// the process noticed that it had passed.
	Waited time.Duration
	// StoreTime is how long of the budget the store had the call while this
	// process was running, as far as the process could tell: from when
	// the request was sent (when the store says, store.UnansweredError;
	// from the start of the call when it does not) to the deadline, less
	// the time the process was stalled meanwhile.
	StoreTime time.Duration
	// Overloaded: StoreTime is less than half of Budget. The store is not
	// counted as failed.
	Overloaded bool
}

func (e *BudgetError) Error() string {
	if e.Overloaded {
		return fmt.Sprintf("keycap: no answer within the decision budget of %s, the process overloaded (the store had the call for %s of it): %v",
			e.Budget, e.StoreTime.Round(time.Millisecond), e.Err)
	}
	return fmt.Sprintf("keycap: the store did not answer within the decision budget of %s: %v", e.Budget, e.Err)
}

// Unwrap returns the store's error.
func (e *BudgetError) Unwrap() error { return e.Err }
