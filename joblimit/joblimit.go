// Package joblimit lets at most N jobs run at once per key, on any job queue:
// a job that finds no free slot goes back to the queue for a while, without
// spending its retries. riverlimit and asynqlimit apply it to River and asynq.
//
// A Rule says how many jobs may run at once per key, how long a refused job
// waits before its next try, and how long it may keep waiting in all:
//
//	rule, err := joblimit.NewRule("outlook:"+providerID, 4,
//		joblimit.WithSharedPool(),              // across job kinds
//		joblimit.WithReleaseAfter(10*time.Second), // plus up to 5 s of jitter
//		joblimit.WithDeadline(time.Hour),        // then fail, through the queue's failure path
//	)
//
// Limiter.Run takes a slot for a job and runs it, or tells the adapter what
// to do instead: release the job (*ReleaseError), drop it (*SkipError), or
// fail it (*DeadlineError). The slot is a keycap lease: it is renewed while
// the job runs, released when the job ends however it ends, and freed by its
// TTL if the worker dies.
package joblimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keycap/keycap"
)

// Limiter runs jobs under rules, with slots from a keycap Limiter.
type Limiter struct {
	l     *keycap.Limiter
	marks keycap.Marker // nil when the store keeps no marks
}

// New returns a Limiter that takes slots from l. Rules with a deadline need a
// store that keeps marks (keycap.Marker), as memstore and redisstore do.
func New(l *keycap.Limiter) (*Limiter, error) {
	if l == nil {
		return nil, errors.New("joblimit: New: limiter is nil")
	}
	jl := &Limiter{l: l}
	jl.marks, _ = l.Store().(keycap.Marker)
	return jl, nil
}

// Job describes the job a rule applies to.
type Job struct {
	// Kind is the job's kind (River) or type (asynq). Each kind has its own
	// pools unless the rule shares them.
	Kind string
	// ID identifies the job across its attempts; it keys the deadline.
	ID string
	// Timeout is how long the queue lets the job run, 0 if unknown. The slot
	// TTL follows it.
	Timeout time.Duration
}

var (
	// ErrReleased matches a *ReleaseError: the job found no slot and goes
	// back to the queue.
	ErrReleased = errors.New("joblimit: no free slot, job released")
	// ErrSkipped matches a *SkipError: the job found no slot and is dropped.
	ErrSkipped = errors.New("joblimit: no free slot, job skipped")
	// ErrDeadline matches a *DeadlineError: the job waited for a slot past
	// its rule's deadline.
	ErrDeadline = errors.New("joblimit: job waited for a slot past its deadline")
)

// ReleaseError asks the queue to run the job again after Delay, without
// counting an attempt. Err is the refusal: a *keycap.LimitError, or a
// *keycap.StoreError when the store failed and the rule fails closed.
type ReleaseError struct {
	Pool  string
	Key   string
	Delay time.Duration
	Err   error
}

func (e *ReleaseError) Error() string {
	return fmt.Sprintf("joblimit: no free slot in pool %s, job released for %s: %v", e.Pool, e.Delay.Round(time.Millisecond), e.Err)
}

// Is makes errors.Is(err, ErrReleased) true.
func (e *ReleaseError) Is(target error) bool { return target == ErrReleased }

// Unwrap returns the refusal.
func (e *ReleaseError) Unwrap() error { return e.Err }

// SkipError asks the queue to drop the job (WithSkip).
type SkipError struct {
	Pool string
	Key  string
	Err  error
}

func (e *SkipError) Error() string {
	return fmt.Sprintf("joblimit: no free slot in pool %s, job skipped: %v", e.Pool, e.Err)
}

// Is makes errors.Is(err, ErrSkipped) true.
func (e *SkipError) Is(target error) bool { return target == ErrSkipped }

// Unwrap returns the refusal.
func (e *SkipError) Unwrap() error { return e.Err }

// DeadlineError fails a job that waited for a slot longer than its rule's
// deadline allows.
type DeadlineError struct {
	Pool     string
	Key      string
	Waited   time.Duration
	Deadline time.Duration
	Err      error
}

func (e *DeadlineError) Error() string {
	return fmt.Sprintf("joblimit: job waited %s for a slot in pool %s, past its deadline of %s", e.Waited.Round(time.Second), e.Pool, e.Deadline)
}

// Is makes errors.Is(err, ErrDeadline) true.
func (e *DeadlineError) Is(target error) bool { return target == ErrDeadline }

// Unwrap returns the last refusal.
func (e *DeadlineError) Unwrap() error { return e.Err }

// Run takes a slot of rule for job and runs work with it, releasing the slot
// when work returns or panics. It returns work's error untouched.
//
// When there is no free slot (or the store failed and the rule fails closed)
// work does not run, and Run returns a *ReleaseError with the delay to wait,
// a *SkipError with WithSkip, or a *DeadlineError once the job has waited
// longer than the rule's deadline. A store failure with a rule that fails
// open runs work without a slot.
func (jl *Limiter) Run(ctx context.Context, rule Rule, job Job, work func(context.Context) error) error {
	pool, key := rule.Pool(job.Kind), rule.Key()
	lim, err := keycap.NewLimit(pool, key, rule.limit,
		keycap.WithTTL(rule.slotTTL(job.Timeout)), keycap.WithFailMode(rule.fail), keycap.WithBudget(rule.budget))
	if err != nil {
		return err
	}
	lease, err := jl.l.Acquire(ctx, lim)
	if err == nil {
		defer lease.Release()
		return work(ctx)
	}
	if !errors.Is(err, keycap.ErrLimitExceeded) && !errors.Is(err, keycap.ErrStoreUnavailable) {
		return err // the context ended, or the limit is invalid
	}
	if rule.deadline > 0 {
		if err := CheckDeadline(ctx, jl.marks, pool, key, job, rule.deadline, err); err != nil {
			return err
		}
	}
	if rule.skip {
		return &SkipError{Pool: pool, Key: key, Err: err}
	}
	return &ReleaseError{Pool: pool, Key: key, Delay: rule.delay(), Err: err}
}

// CheckDeadline reads how long job has been waiting in pool (for key), starting its
// clock at its first refusal, and returns a *DeadlineError wrapping cause
// once the wait exceeds deadline; nil before that. The clock is a mark in
// marks keyed by the pool and the job's ID, by the store's clock, so it
// counts whichever server runs each attempt. When the store cannot say, it
// returns nil: the job is released rather than failed.
func CheckDeadline(ctx context.Context, marks keycap.Marker, pool, key string, job Job, deadline time.Duration, cause error) error {
	if marks == nil {
		return fmt.Errorf("joblimit: pool %s: a deadline needs a store that keeps marks (keycap.Marker)", pool)
	}
	if job.ID == "" {
		return fmt.Errorf("joblimit: pool %s: a deadline needs the job's ID", pool)
	}
	// The mark outlives the deadline, so that a job failed at its deadline and
	// retried later by its queue is not given a fresh one.
	age, _, err := marks.Mark(ctx, keycap.NewPoolID("keycap:job-wait:"+pool, job.ID), 2*deadline+time.Hour)
	if err != nil || age < deadline {
		return nil
	}
	return &DeadlineError{Pool: pool, Key: key, Waited: age, Deadline: deadline, Err: cause}
}
