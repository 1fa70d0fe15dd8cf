// Package jobtype holds what keycap's job front doors share: the job a rule
// applies to, what a front door tells a queue to do instead of running it
// (release it, skip it, fail it past its deadline), and the Runner interface
// that queue adapters translate. It is a leaf: joblimit (slots per key) and
// pause (paused and paced APIs) both build on it without importing each
// other, and riverlimit and asynqlimit translate its results into River's
// and asynq's.
package jobtype

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
)

// Job describes the job a front door decides on.
type Job struct {
	// Kind is the job's kind (River) or type (asynq).
	Kind string
	// ID identifies the job across its attempts; it keys its deadline.
	ID string
	// Timeout is how long the queue lets the job run, 0 if unknown.
	Timeout time.Duration
	// Attempt counts the job's real attempts as its queue does (River's
	// attempt, asynq's retry count): the same across releases, which spend
	// none, and different after a failure or a rescue. With ID it names the
	// attempt that waits for a slot, on whatever server it comes back.
	Attempt int
	// Wake, when the adapter can, makes the job runnable now if it is
	// waiting in the queue after a release (River's JobRetry, asynq's
	// RunTask). A Runner calls it when the slot the job waits for is handed
	// to it; nil: the job comes back at its release delay.
	Wake func(ctx context.Context) error
}

// Runner runs a job under a front door's rule: it runs work (and returns its
// error untouched), or returns, without running it, a *ReleaseError, a
// *SkipError or a *DeadlineError that says what the queue should do instead.
// Queue adapters (riverlimit, asynqlimit) translate those.
type Runner interface {
	Run(ctx context.Context, job Job, work func(context.Context) error) error
}

// RunnerFunc adapts a function to a Runner.
type RunnerFunc func(ctx context.Context, job Job, work func(context.Context) error) error

// Run calls f(ctx, job, work).
func (f RunnerFunc) Run(ctx context.Context, job Job, work func(context.Context) error) error {
	return f(ctx, job, work)
}

var (
	// ErrReleased matches a *ReleaseError: the job goes back to the queue.
	ErrReleased = errors.New("keycap: job released")
	// ErrSkipped matches a *SkipError: the job is dropped.
	ErrSkipped = errors.New("keycap: job skipped")
	// ErrDeadline matches a *DeadlineError: the job was held back past its
	// deadline.
	ErrDeadline = errors.New("keycap: job held back past its deadline")
)

// ReleaseError asks the queue to run the job again after Delay, without
// counting an attempt. By names what held it back: a pool ("job:export") or
// an API ("pause:api.vendor.com"); Key is the pool's key, if any. Err is the
// reason: a *keycap.LimitError, a *keycap.StoreError (failing closed), or a
// pause's error.
type ReleaseError struct {
	By    string
	Key   string
	Delay time.Duration
	Err   error
}

func (e *ReleaseError) Error() string {
	return fmt.Sprintf("keycap: job released by %s for %s: %v", e.By, e.Delay.Round(time.Millisecond), e.Err)
}

// Is makes errors.Is(err, ErrReleased) true.
func (e *ReleaseError) Is(target error) bool { return target == ErrReleased }

// Unwrap returns the reason.
func (e *ReleaseError) Unwrap() error { return e.Err }

// SkipError asks the queue to drop the job.
type SkipError struct {
	By  string
	Key string
	Err error
}

func (e *SkipError) Error() string {
	return fmt.Sprintf("keycap: job skipped by %s: %v", e.By, e.Err)
}

// Is makes errors.Is(err, ErrSkipped) true.
func (e *SkipError) Is(target error) bool { return target == ErrSkipped }

// Unwrap returns the reason.
func (e *SkipError) Unwrap() error { return e.Err }

// DeadlineError fails a job that has been held back longer than its
// deadline allows, through the queue's normal failure path.
type DeadlineError struct {
	By       string
	Key      string
	Waited   time.Duration
	Deadline time.Duration
	Err      error
}

func (e *DeadlineError) Error() string {
	return fmt.Sprintf("keycap: job held back by %s for %s, past its deadline of %s", e.By, e.Waited.Round(time.Second), e.Deadline)
}

// Is makes errors.Is(err, ErrDeadline) true.
func (e *DeadlineError) Is(target error) bool { return target == ErrDeadline }

// Unwrap returns the last reason the job was held back.
func (e *DeadlineError) Unwrap() error { return e.Err }

// CheckDeadline reads how long job has been held back by by, starting its
// clock the first time, and returns a *DeadlineError wrapping cause once
// that exceeds deadline; nil before. The clock is a mark in the Limiter's
// store (frontdoor.Since), by the store's clock, so it counts whichever
// server runs each attempt. When the store fails, it returns nil: the job is
// released rather than failed. When the store keeps no marks, it returns an
// error matching keycap.ErrNotSupported: a deadline on such a store is a
// configuration error, and the job fails with it rather than wait without
// the bound it was given.
func CheckDeadline(ctx context.Context, l *keycap.Limiter, by, key string, job Job, deadline time.Duration, cause error) error {
	if job.ID == "" {
		return fmt.Errorf("keycap: %s: a deadline needs the job's ID", by)
	}
	// The mark outlives the deadline, so that a job failed at its deadline
	// and retried later by its queue is not given a fresh one.
	age, err := frontdoor.Since(ctx, l, "job-wait:"+by, job.ID, 2*deadline+time.Hour)
	if errors.Is(err, keycap.ErrNotSupported) {
		return err
	}
	if err != nil || age < deadline {
		return nil
	}
	return &DeadlineError{By: by, Key: key, Waited: age, Deadline: deadline, Err: cause}
}
