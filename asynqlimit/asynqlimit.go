// Package asynqlimit lets at most N asynq tasks run at once per key, across
// every server. A task that finds no free slot is retried after the rule's
// delay without counting as a failure: its Retried counter does not move, and
// the queue's processed and failed statistics are untouched.
//
// Three pieces: handler middleware, and two server settings that make a
// release a non-failure with the rule's delay:
//
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:      asynqlimit.IsFailure(nil),
//		RetryDelayFunc: asynqlimit.RetryDelay(asynq.DefaultRetryDelayFunc),
//	})
//	mux := asynq.NewServeMux()
//	mux.Use(asynqlimit.Middleware(jobs, func(ctx context.Context, t *asynq.Task) (joblimit.Rule, bool) {
//		if t.Type() != "email:send" {
//			return joblimit.Rule{}, false
//		}
//		return joblimit.MustRule(gjson.GetBytes(t.Payload(), "tenant").String(), 2), true
//	}))
//
// Both settings recognise a release with errors.As, so a handler or another
// middleware may wrap it.
//
// A task with no free slot first waits for one in the pool's line, holding
// its worker, up to joblimit.DefaultWaitInPlace: a slot freed on any server
// is handed to it at once. Then it is released; with WithInspector it keeps
// its ticket (parked) and is made pending the moment a slot is handed to it
// (Inspector.RunTask), its retry delay (joblimit.DefaultParkFor) being the
// fallback should the wake-up be lost.
//
// asynq's caveat: asynq archives a task whose Retried count has reached its
// MaxRetry before it looks at IsFailure, even for a non-failure. Releases never
// move that count, so only tasks whose real failures used up their retries
// (or that were enqueued with asynq.MaxRetry(0)) are affected; for those the
// middleware returns an error saying the task could not be released, and asynq
// archives it with that message — never silently.
package asynqlimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/jobtype"
	"github.com/keycap/keycap/pause"
)

// Use returns handler middleware that runs each task through the Runner
// pick gives it — a joblimit rule (joblimit.Limiter.For), a pause
// (pause.Pauses.Respecting, Pacing), or your own — and turns a release into a
// non-failure retry after its delay (with the two server settings IsFailure
// and RetryDelay) and a skip into a revoked task; a task for which pick
// reports false runs as is. The constructors below are Use with a pick of
// each kind.
func Use(pick func(ctx context.Context, t *asynq.Task) (jobtype.Runner, bool), opts ...Option) asynq.MiddlewareFunc {
	var c config
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			runner, ok := pick(ctx, t)
			if !ok {
				return next.ProcessTask(ctx, t)
			}
			j := job(ctx, t)
			if c.inspector != nil {
				queue, _ := asynq.GetQueueName(ctx)
				id, _ := asynq.GetTaskID(ctx)
				retried, _ := asynq.GetRetryCount(ctx)
				j.Wake = func(ctx context.Context) error { return wake(ctx, c.inspector, queue, id, retried) }
			}
			err := runner.Run(ctx, j, func(ctx context.Context) error { return next.ProcessTask(ctx, t) })
			return outcome(ctx, err)
		})
	}
}

// An Option configures the middleware.
type Option struct{ apply func(*config) }

type config struct{ inspector TaskRunner }

// TaskRunner is the part of an asynq Inspector that wakes a released task:
// *asynq.Inspector is one.
type TaskRunner interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	RunTask(queue, id string) error
}

// WithInspector lets the middleware wake parked tasks: a task released for
// want of a slot keeps its ticket in the pool's line, and when a slot is
// handed to it, on any server, the middleware makes it pending at once
// (Inspector.RunTask) instead of leaving it to its retry delay
// (joblimit.DefaultParkFor, the fallback should the wake-up be lost).
// Without it, released tasks come back after the rule's release delay.
func WithInspector(i TaskRunner) Option { return Option{func(c *config) { c.inspector = i }} }

// wake makes the released task id pending now, once asynq has moved it to
// its retry set: while it is still active (the attempt that was released
// has not returned yet), or Redis fails, it looks again every 10 ms, until
// ctx ends. A task in any other state (pending, archived, completed, gone) is
// left alone, so that a wake-up that comes late never runs a task twice.
//
// Only the attempt that was released is woken (retried: its retry count),
// and only while its retry is more than a second away: a task due sooner is
// left to asynq, since RunTask would also revive a task that completed or
// was archived in between.
func wake(ctx context.Context, ins TaskRunner, queue, id string, retried int) error {
	for {
		info, err := ins.GetTaskInfo(queue, id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound):
			return nil
		case err != nil:
			// Redis is busy or failing over: try again while the slot
			// stays reserved (ctx).
		case info.Retried != retried:
			return nil // another attempt
		case (info.State == asynq.TaskStateRetry || info.State == asynq.TaskStateScheduled) &&
			!info.NextProcessAt.After(time.Now().Add(time.Second)):
			return nil // due anyway
		case info.State == asynq.TaskStateRetry || info.State == asynq.TaskStateScheduled:
			if err = ins.RunTask(queue, id); err == nil || errors.Is(err, asynq.ErrTaskNotFound) {
				return nil
			}
		case info.State == asynq.TaskStateActive:
			// asynq has not moved the released attempt to its retry set yet.
		default:
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Middleware returns handler middleware that applies rule(ctx, task) to every
// task; a task for which rule reports false runs unlimited. The slot TTL
// follows the task's deadline (its timeout) unless the rule sets one.
func Middleware(jobs *joblimit.Limiter, rule func(ctx context.Context, t *asynq.Task) (joblimit.Rule, bool), opts ...Option) asynq.MiddlewareFunc {
	return Use(func(ctx context.Context, t *asynq.Task) (jobtype.Runner, bool) {
		r, ok := rule(ctx, t)
		return jobs.For(r), ok
	}, opts...)
}

// job describes task to a Runner: its type, its ID, and its timeout (the
// time left before its context's deadline).
func job(ctx context.Context, t *asynq.Task) jobtype.Job {
	id, _ := asynq.GetTaskID(ctx)
	var timeout time.Duration
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	retried, _ := asynq.GetRetryCount(ctx)
	return jobtype.Job{Kind: t.Type(), ID: "asynq:" + id, Timeout: timeout, Attempt: retried}
}

// outcome turns a Runner's results into asynq's: a release is returned as
// is (IsFailure and RetryDelay recognise it), unless the task has no retries
// left; a skip revokes the task. Any other error, a *jobtype.DeadlineError
// included, is a failure.
func outcome(ctx context.Context, err error) error {
	var rel *jobtype.ReleaseError
	var skip *jobtype.SkipError
	switch {
	case errors.As(err, &rel):
		retried, _ := asynq.GetRetryCount(ctx)
		maxRetry, _ := asynq.GetMaxRetry(ctx)
		if retried >= maxRetry {
			return &NotReleasableError{Retried: retried, MaxRetry: maxRetry, Err: rel}
		}
		return rel
	case errors.As(err, &skip):
		return fmt.Errorf("%w: %w", asynq.RevokeTask, skip)
	}
	return err
}

// RespectPauses returns handler middleware that keeps tasks from calling a
// paused API ("respect Retry-After"). api names the API a task calls, or
// reports false for a task that calls none. Before the task runs, a paused
// API releases it until the pause ends, plus jitter, without a request and
// without spending a retry. A task that returns a throttling error — a
// *pause.PausedError from pause.Transport, or a *pause.ThrottledError from
// Pauses.Check — pauses the API for every server and is released the same
// way. Other errors go to asynq's own retry rules. It needs the same two
// server settings as Middleware (IsFailure, RetryDelay).
//
// Use it before Middleware (mux.Use(RespectPauses(...), Middleware(...))), so
// that a task arriving during a pause is released before it takes a slot.
func RespectPauses(ps *pause.Pauses, api func(ctx context.Context, t *asynq.Task) (string, bool)) asynq.MiddlewareFunc {
	return Use(func(ctx context.Context, t *asynq.Task) (jobtype.Runner, bool) {
		a, ok := api(ctx, t)
		return ps.Respecting(a), ok
	})
}

// PaceJobs returns handler middleware that runs tasks at their API's rate
// (pause.WithRate), shared by every server: a task over the rate is released
// until it is within it, without spending a retry. api names the API a task
// calls, or reports false for a task that is not paced. The rate counts
// tasks; pause.Transport's pacing counts requests: use one. It needs the same
// two server settings as Middleware.
func PaceJobs(ps *pause.Pauses, api func(ctx context.Context, t *asynq.Task) (string, bool)) asynq.MiddlewareFunc {
	return Use(func(ctx context.Context, t *asynq.Task) (jobtype.Runner, bool) {
		a, ok := api(ctx, t)
		return ps.Pacing(a), ok
	})
}

// NotReleasableError is returned for a task that found no slot but has no
// retries left, which asynq archives instead of retrying.
type NotReleasableError struct {
	Retried, MaxRetry int
	Err               *jobtype.ReleaseError
}

func (e *NotReleasableError) Error() string {
	return fmt.Sprintf("asynqlimit: task cannot be released, it has no retries left (retried %d of %d), so asynq archives it: %v",
		e.Retried, e.MaxRetry, e.Err)
}

// Unwrap returns the refusal's cause (the *keycap.LimitError or
// *keycap.StoreError), not the release: this error is a real failure.
func (e *NotReleasableError) Unwrap() error { return e.Err.Err }

// IsFailure returns an asynq Config.IsFailure that reports a released task as
// no failure, and defers to next for every other error (nil next: every
// error is a failure, asynq's default).
func IsFailure(next func(error) bool) func(error) bool {
	return func(err error) bool {
		if _, ok := released(err); ok {
			return false
		}
		if next != nil {
			return next(err)
		}
		return err != nil
	}
}

// RetryDelay returns an asynq Config.RetryDelayFunc that retries a released
// task after its rule's delay, and defers to next for every other error (nil
// next: asynq.DefaultRetryDelayFunc).
func RetryDelay(next asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if next == nil {
		next = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		if rel, ok := released(err); ok {
			return rel.Delay
		}
		return next(n, err, t)
	}
}

// released finds a release in err's chain; a NotReleasableError is not one.
func released(err error) (*jobtype.ReleaseError, bool) {
	var rel *jobtype.ReleaseError
	var nr *NotReleasableError
	if errors.As(err, &rel) && !errors.As(err, &nr) {
		return rel, true
	}
	return nil, false
}
