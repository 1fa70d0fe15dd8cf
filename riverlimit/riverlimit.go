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
// A job with no free slot first waits for one in the pool's line, holding
// its worker, up to joblimit.DefaultWaitInPlace: a slot freed on any server
// is handed to it at once. Then it is snoozed for joblimit.DefaultParkFor
// with its ticket kept (parked): when a slot is handed to it, the
// middleware makes it available at once (Client.JobRetry, once River has
// recorded the snooze), and it claims the slot; a wake-up that was lost
// brings it back at the end of the snooze. The client is the one River
// puts in the job's context (WithClient for another).
//
// A refused job's metadata records the pool that refused it
// ("keycap_snoozed_by"), next to River's own "snoozes" count. A job with
// joblimit.WithSkip is cancelled (river.JobCancel). A job past its rule's
// deadline fails with a *jobtype.DeadlineError, which counts as an attempt
// like any error. Use takes any jobtype.Runner, so one translation serves
// slots, pauses and paces.
//
// RespectPauses does the same for a paused API (package pause): a job that
// would call an API that answered 429 is snoozed until the pause ends.
package riverlimit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/jobtype"
	"github.com/keycap/keycap/pause"
)

// An Option configures the middleware.
type Option struct{ apply func(*middleware) }

// WithJobTimeout tells the middleware the client's JobTimeout (River's
// default: river.JobTimeoutDefault), from which a rule's default slot TTL
// follows. A worker that overrides Timeout should set its rules' TTL itself
// (the TTL of the rule's keycap.Spec).
func WithJobTimeout(d time.Duration) Option { return Option{func(m *middleware) { m.timeout = d }} }

// Retrier is the part of a River client that wakes a parked job: a
// *river.Client of any transaction type is one.
type Retrier interface {
	JobGet(ctx context.Context, id int64) (*rivertype.JobRow, error)
	JobRetry(ctx context.Context, id int64) (*rivertype.JobRow, error)
}

// WithClient gives the middleware the River client that wakes parked jobs
// (JobRetry). Without it, the middleware uses the client River puts in each
// job's context (river.ClientFromContext) when its transaction type is
// pgx.Tx or *sql.Tx; WithClient is for other drivers.
func WithClient(c Retrier) Option { return Option{func(m *middleware) { m.client = c }} }

// middleware is every constructor's middleware: it runs each job through the
// Runner its pick function gives, and translates the Runner's results into
// River's.
type middleware struct {
	river.MiddlewareDefaults
	pick    func(*rivertype.JobRow) (jobtype.Runner, bool)
	timeout time.Duration
	client  Retrier
}

// Use returns worker middleware that runs each job through the Runner pick
// gives it — a joblimit rule (joblimit.Limiter.For), a pause
// (pause.Pauses.Respecting, Pacing), or your own — and turns a release into a
// snooze (no attempt spent) and a skip into a cancellation; a job for which
// pick reports false runs as is. The constructors below are Use with a pick
// of each kind.
func Use(pick func(job *rivertype.JobRow) (jobtype.Runner, bool), opts ...Option) rivertype.WorkerMiddleware {
	m := &middleware{pick: pick, timeout: river.JobTimeoutDefault}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(m)
		}
	}
	return m
}

// Middleware returns worker middleware that applies rule(job) to every job it
// sees; a job for which rule reports false runs unlimited.
func Middleware(jobs *joblimit.Limiter, rule func(job *rivertype.JobRow) (joblimit.Rule, bool), opts ...Option) rivertype.WorkerMiddleware {
	return Use(func(job *rivertype.JobRow) (jobtype.Runner, bool) {
		r, ok := rule(job)
		return jobs.For(r), ok
	}, opts...)
}

// Limit returns worker middleware that applies one rule, for a worker's
// Middleware method.
func Limit(jobs *joblimit.Limiter, rule joblimit.Rule, opts ...Option) rivertype.WorkerMiddleware {
	runner := jobs.For(rule)
	return Use(func(*rivertype.JobRow) (jobtype.Runner, bool) { return runner, true }, opts...)
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
	return Use(func(job *rivertype.JobRow) (jobtype.Runner, bool) {
		a, ok := api(job)
		return ps.Respecting(a), ok
	})
}

// PaceJobs returns worker middleware that runs jobs at their API's rate
// (pause.WithRate), shared by every worker of every server: a job over the
// rate is snoozed until it is within it, without spending an attempt. api
// names the API a job calls, or reports false for a job that is not paced.
// The rate counts jobs; pause.Transport's pacing counts requests: use one.
func PaceJobs(ps *pause.Pauses, api func(job *rivertype.JobRow) (string, bool)) rivertype.WorkerMiddleware {
	return Use(func(job *rivertype.JobRow) (jobtype.Runner, bool) {
		a, ok := api(job)
		return ps.Pacing(a), ok
	})
}

// MetadataKey is the job metadata key that names what last held the job
// back: the pool that refused it a slot, or the paused API.
const MetadataKey = "keycap_snoozed_by"

// Work implements rivertype.WorkerMiddleware.
func (m *middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	runner, ok := m.pick(job)
	if !ok {
		return doInner(ctx)
	}
	j := jobtype.Job{Kind: job.Kind, ID: "river:" + strconv.FormatInt(job.ID, 10), Timeout: m.timeout, Attempt: job.Attempt}
	if c := m.retrier(ctx); c != nil {
		id, attempted := job.ID, job.AttemptedAt
		j.Wake = func(ctx context.Context) error { return wake(ctx, c, id, attempted) }
	}
	err := runner.Run(ctx, j, doInner)
	return outcome(ctx, job, err)
}

// retrier returns the client that wakes jobs, or nil.
func (m *middleware) retrier(ctx context.Context) Retrier {
	if m.client != nil {
		return m.client
	}
	if c, err := river.ClientFromContextSafely[pgx.Tx](ctx); err == nil {
		return c
	}
	if c, err := river.ClientFromContextSafely[*sql.Tx](ctx); err == nil {
		return c
	}
	return nil
}

// wake makes the snoozed job id available now, once River has recorded the
// snooze of the attempt that parked it (attempted then): while that attempt
// still shows as running, or the database fails, it looks again every 10 ms,
// until ctx ends. A job in any other state (completed, cancelled, running
// again) is left alone, so that a wake-up that comes late never runs a job twice.
func wake(ctx context.Context, c Retrier, id int64, attempted *time.Time) error {
	for {
		row, err := c.JobGet(ctx, id)
		switch {
		case errors.Is(err, river.ErrNotFound):
			return nil
		case err != nil:
			// The database is busy or failing over: try again while the
			// slot stays reserved (ctx).
		case row.State == rivertype.JobStateScheduled && !row.ScheduledAt.After(time.Now().Add(time.Second)):
			// Due within a second anyway: River runs it. (JobRetry makes a
			// job in any state but running available, a completed one
			// included; leaving a job that River is about to fetch alone
			// keeps a late wake-up from running it twice.)
			return nil
		case row.State == rivertype.JobStateScheduled:
			if _, err = c.JobRetry(ctx, id); err == nil {
				return nil
			}
		case row.State == rivertype.JobStateRunning && sameTime(row.AttemptedAt, attempted):
			// River has not recorded the snooze yet.
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

func sameTime(a, b *time.Time) bool {
	return a != nil && b != nil && a.Equal(*b)
}

// outcome turns a Runner's results into River's: a release becomes a snooze
// (no attempt spent), a skip a cancellation. Any other error,
// *jobtype.DeadlineError included, goes to River as a failure.
func outcome(ctx context.Context, job *rivertype.JobRow, err error) error {
	var rel *jobtype.ReleaseError
	var skip *jobtype.SkipError
	switch {
	case errors.As(err, &rel):
		// MetadataSet only works inside a River worker: outside one (a test
		// calling Work directly), the job cannot be snoozed, and that is an
		// error, not a silent drop.
		if merr := river.MetadataSet(ctx, MetadataKey, rel.By); merr != nil {
			return fmt.Errorf("riverlimit: job %d cannot be snoozed (%v): %w", job.ID, merr, rel)
		}
		return river.JobSnooze(rel.Delay)
	case errors.As(err, &skip):
		return river.JobCancel(skip)
	}
	return err
}
