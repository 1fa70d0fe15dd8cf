// Package riverlimit lets at most N River jobs run at once per key. A job
// that finds no free slot is snoozed (river.JobSnooze): it goes back to the
// queue for the rule's delay and its attempt is not consumed (River 0.16 and
// later). Its slot is released when the job ends, however it ends, and
// renewed while it runs.
//
// As global middleware, with the rule of each job computed from the job:
//
//	river.Config{
//		Middleware: []rivertype.Middleware{
//			riverlimit.Middleware(jobs, func(job *rivertype.JobRow) (joblimit.Rule, bool) {
//				if job.Kind != "sync_calendar" {
//					return joblimit.Rule{}, false // not limited
//				}
//				return joblimit.MustRule(gjson.GetBytes(job.EncodedArgs, "provider").String(), 4), true
//			}),
//		},
//	}
//
// Or per worker, from the worker's Middleware method:
//
//	func (w *SyncWorker) Middleware(job *rivertype.JobRow) []rivertype.WorkerMiddleware {
//		return []rivertype.WorkerMiddleware{riverlimit.Limit(jobs, joblimit.MustRule("outlook", 4))}
//	}
//
// A refused job's metadata records the pool that refused it
// ("keycap_snoozed_by"), next to River's own "snoozes" count. A job with
// joblimit.WithSkip is cancelled (river.JobCancel). A job past its rule's
// deadline fails with a *joblimit.DeadlineError, which counts as an attempt
// like any error.
//
// RespectPauses does the same for a paused API (package pause): a job that
// would call an API that answered 429 is snoozed until the pause ends.
package riverlimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/pause"
)

// An Option configures the middleware.
type Option func(*middleware)

// WithJobTimeout tells the middleware the client's JobTimeout (River's
// default: river.JobTimeoutDefault), from which a rule's default slot TTL
// follows. A worker that overrides Timeout should set its rules' TTL itself
// (joblimit.WithTTL).
func WithJobTimeout(d time.Duration) Option { return func(m *middleware) { m.timeout = d } }

type middleware struct {
	river.MiddlewareDefaults
	jobs    *joblimit.Limiter
	rule    func(*rivertype.JobRow) (joblimit.Rule, bool)
	timeout time.Duration
}

// Middleware returns worker middleware that applies rule(job) to every job it
// sees; a job for which rule reports false runs unlimited.
func Middleware(jobs *joblimit.Limiter, rule func(job *rivertype.JobRow) (joblimit.Rule, bool), opts ...Option) rivertype.WorkerMiddleware {
	m := &middleware{jobs: jobs, rule: rule, timeout: river.JobTimeoutDefault}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Limit returns worker middleware that applies one rule, for a worker's
// Middleware method.
func Limit(jobs *joblimit.Limiter, rule joblimit.Rule, opts ...Option) rivertype.WorkerMiddleware {
	return Middleware(jobs, func(*rivertype.JobRow) (joblimit.Rule, bool) { return rule, true }, opts...)
}

// MetadataKey is the job metadata key that names the pool which last refused
// the job a slot.
const MetadataKey = "keycap_snoozed_by"

// Work implements rivertype.WorkerMiddleware.
func (m *middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	rule, ok := m.rule(job)
	if !ok {
		return doInner(ctx)
	}
	err := m.jobs.Run(ctx, rule, joblimit.Job{
		Kind:    job.Kind,
		ID:      jobID(job),
		Timeout: m.timeout,
	}, doInner)
	return outcome(ctx, job, err)
}

func jobID(job *rivertype.JobRow) string { return "river:" + strconv.FormatInt(job.ID, 10) }

// outcome turns joblimit's instructions into River's: a release becomes a
// snooze (no attempt spent), a skip a cancellation. Any other error,
// *joblimit.DeadlineError included, goes to River as a failure.
func outcome(ctx context.Context, job *rivertype.JobRow, err error) error {
	var rel *joblimit.ReleaseError
	var skip *joblimit.SkipError
	switch {
	case errors.As(err, &rel):
		// MetadataSet only works inside a River worker: outside one (a test
		// calling Work directly), the job cannot be snoozed, and that is an
		// error, not a silent drop.
		if merr := river.MetadataSet(ctx, MetadataKey, rel.Pool); merr != nil {
			return fmt.Errorf("riverlimit: job %d cannot be snoozed (%v): %w", job.ID, merr, rel)
		}
		return river.JobSnooze(rel.Delay)
	case errors.As(err, &skip):
		return river.JobCancel(skip)
	}
	return err
}

// pauses is the middleware of RespectPauses.
type pauses struct {
	river.MiddlewareDefaults
	ps  *pause.Pauses
	api func(*rivertype.JobRow) (string, bool)
}

// RespectPauses returns worker middleware that keeps jobs from calling a
// paused API ("respect Retry-After"). api names the API a job calls, or
// reports false for a job that calls none. Before the job runs, a paused API
// snoozes it until the pause ends, plus jitter, without a request and without
// spending an attempt. A job that returns a throttling error — a
// *pause.PausedError from pause.Transport, or a *pause.ThrottledError from
// Pauses.Check — pauses the API for every worker and is snoozed the same way.
// Other errors go to River's own retry rules.
//
// Put it before the concurrency limit (riverlimit.Middleware) in the
// middleware list, so that a job arriving during a pause is snoozed before it
// takes a slot.
func RespectPauses(ps *pause.Pauses, api func(job *rivertype.JobRow) (string, bool)) rivertype.WorkerMiddleware {
	return &pauses{ps: ps, api: api}
}

// Work implements rivertype.WorkerMiddleware.
func (m *pauses) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	api, ok := m.api(job)
	if !ok {
		return doInner(ctx)
	}
	err := m.ps.RunJob(ctx, api, joblimit.Job{Kind: job.Kind, ID: jobID(job)}, doInner)
	return outcome(ctx, job, err)
}

// paces is the middleware of PaceJobs.
type paces struct {
	river.MiddlewareDefaults
	ps  *pause.Pauses
	api func(*rivertype.JobRow) (string, bool)
}

// PaceJobs returns worker middleware that runs jobs at their API's rate
// (pause.WithRate), shared by every worker of every server: a job over the
// rate is snoozed until it is within it, without spending an attempt. api
// names the API a job calls, or reports false for a job that is not paced.
// The rate counts jobs; pace.Transport's pacing counts requests: use one.
func PaceJobs(ps *pause.Pauses, api func(job *rivertype.JobRow) (string, bool)) rivertype.WorkerMiddleware {
	return &paces{ps: ps, api: api}
}

// Work implements rivertype.WorkerMiddleware.
func (m *paces) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	api, ok := m.api(job)
	if !ok {
		return doInner(ctx)
	}
	return outcome(ctx, job, m.ps.PaceJob(ctx, api, joblimit.Job{Kind: job.Kind, ID: jobID(job)}, doInner))
}
