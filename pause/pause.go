// Package pause makes one 429 pause every worker on every server for that
// API: a pause per API lives in the keycap store (memstore in-process, Redis
// across servers), only ever extends, and ends by itself.
//
// Three pieces use it:
//
//   - Transport, an http.RoundTripper that refuses requests to a paused API
//     without sending them, records a pause from every throttled response
//     (and from responses that say nothing remains, before the 429), and
//     waits in place only when the wait is short and safe;
//   - Pauses.RunJob, behind riverlimit.RespectPauses and
//     asynqlimit.RespectPauses, which releases a job while its API is paused
//     and when it comes back throttled, without spending an attempt;
//   - pacing (WithRate): a shared GCRA rate per API, so that workers stay
//     under a published rate before any 429.
//
// Pauses are built on a keycap.Limiter: its store keeps them (pauses and
// paces are of the family keycap.FamilyPause), its decision budget bounds
// every store call, its outages are reported once, and its observer receives
// the events (Throttled, Exhausted, Paused, CallHeld, CallRetried).
//
// Hints are read by package retryafter: every header form vendors send.
package pause

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/jobtype"
	"github.com/keycap/keycap/retryafter"
	"github.com/keycap/keycap/store"
)

// Pauses keeps the pauses and paces of APIs in a keycap store.
type Pauses struct {
	l        *keycap.Limiter
	store    store.Store
	parser   retryafter.Parser
	rates    func(api string) (Rate, bool)
	jitter   time.Duration
	deadline time.Duration
}

// An Option configures Pauses.
type Option struct{ apply func(*config) }

type config struct {
	parser    retryafter.Parser
	rates     func(api string) (Rate, bool)
	jitter    time.Duration
	jitterSet bool
	deadline  time.Duration
}

// WithParser sets how responses are read: the wait of a throttled response
// without a hint (default 60 s) and the cap on any wait (default 24 h).
func WithParser(p retryafter.Parser) Option { return Option{func(c *config) { c.parser = p }} }

// Rate is a pace: at most Events per Period on average, with bursts of up
// to Burst events (at least 1).
type Rate = store.Rate

// WithRate paces calls to APIs: rates(api) returns the API's published rate,
// or false for none. Every worker of every server shares the pace. The store
// must pace (store.Paces).
func WithRate(rates func(api string) (Rate, bool)) Option {
	return Option{func(c *config) { c.rates = rates }}
}

// WithJitter sets the random extra delay added to a released job's wait, so
// that jobs paused together do not come back together. Default: 1 s plus a
// tenth of the wait, drawn at random up to that.
func WithJitter(d time.Duration) Option {
	return Option{func(c *config) { c.jitter, c.jitterSet = d, true }}
}

// WithJobDeadline bounds how long a job may keep being released for
// throttling, from the first time it was: past it, the job fails with a
// *jobtype.DeadlineError through the queue's normal failure path. The
// releases never spend attempts, so the deadline, not a count, bounds them.
// The store must keep marks (store.Marks). Default: no bound.
func WithJobDeadline(d time.Duration) Option { return Option{func(c *config) { c.deadline = d }} }

// New returns the pauses kept in limiter's store, which must keep pauses
// (store.Pauses: memstore, redisstore, pgstore, nullstore); pacing
// (WithRate) needs paces too (store.Paces), and a job deadline marks
// (store.Marks).
func New(limiter *keycap.Limiter, opts ...Option) (*Pauses, error) {
	if limiter == nil {
		return nil, errors.New("pause: New: limiter is nil")
	}
	var c config
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	ps := &Pauses{l: limiter, parser: c.parser, rates: c.rates, jitter: -1, deadline: c.deadline}
	if c.jitterSet {
		ps.jitter = c.jitter
	}
	ps.store = frontdoor.Store(limiter)
	need := store.Pauses
	if c.rates != nil {
		need |= store.Paces
	}
	if c.deadline > 0 {
		need |= store.Marks
	}
	if err := frontdoor.Need(limiter, need); err != nil {
		return nil, fmt.Errorf("pause: %w", err)
	}
	switch {
	case c.jitterSet && c.jitter < 0:
		return nil, &keycap.InvalidLimitError{Field: "jitter", Value: c.jitter.String(), Reason: "must be at least 0"}
	case c.deadline < 0:
		return nil, &keycap.InvalidLimitError{Field: "job deadline", Value: c.deadline.String(), Reason: "must be at least 0"}
	}
	return ps, nil
}

// ErrNoAPIName is the error of a call whose API name is empty: it would
// share one pause with every other nameless call.
var ErrNoAPIName = errors.New("pause: the API name is empty")

// limit returns the limit that names api's pause (what "pause") or pace
// ("pace") to the store.
func limit(what, api string) (keycap.Limit, error) {
	if api == "" {
		return keycap.Limit{}, ErrNoAPIName
	}
	return keycap.Spec{Name: what, Max: 1, Family: keycap.FamilyPause}.For(api), nil
}

// Pause pauses api for at least d: a longer pause already running is kept.
// It returns when the pause now ends.
func (ps *Pauses) Pause(ctx context.Context, api string, d time.Duration) (time.Time, error) {
	lim, err := limit("pause", api)
	if err != nil {
		return time.Time{}, err
	}
	var left time.Duration
	err = frontdoor.Call(ctx, ps.l, lim, func(ctx context.Context) error {
		var err error
		left, err = ps.store.Pause(ctx, lim.Pool(), d)
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	if left > 0 {
		ps.emit(keycap.Event{Kind: keycap.Paused, API: api, Wait: left})
	}
	return time.Now().Add(left), nil
}

// Paused returns how long api remains paused (0: it is not). A store failure
// is reported once per outage and returned.
func (ps *Pauses) Paused(ctx context.Context, api string) (time.Duration, error) {
	lim, err := limit("pause", api)
	if err != nil {
		return 0, err
	}
	var left time.Duration
	err = frontdoor.Call(ctx, ps.l, lim, func(ctx context.Context) error {
		var err error
		left, err = ps.store.Paused(ctx, lim.Pool())
		return err
	})
	return left, err
}

// pace takes one call from api's rate: 0 when it may go now, else how long
// until it may. An API without a rate always goes.
func (ps *Pauses) pace(ctx context.Context, api string) (time.Duration, error) {
	if ps.rates == nil {
		return 0, nil
	}
	rate, ok := ps.rates(api)
	if !ok {
		return 0, nil
	}
	lim, err := limit("pace", api)
	if err != nil {
		return 0, err
	}
	var wait time.Duration
	err = frontdoor.Call(ctx, ps.l, lim, func(ctx context.Context) error {
		var err error
		wait, err = ps.store.Pace(ctx, lim.Pool(), rate)
		return err
	})
	return wait, err
}

func (ps *Pauses) emit(e keycap.Event) {
	e.Family = keycap.FamilyPause
	frontdoor.Emit(ps.l, e)
}

// Hint reads a response with the Pauses' parser; body is its start, or nil.
func (ps *Pauses) Hint(resp *http.Response, body []byte) retryafter.Hint {
	return ps.parser.Parse(resp.StatusCode, resp.Header, body)
}

// ErrPaused matches a *PausedError.
var ErrPaused = errors.New("pause: API paused")

// PausedError refuses a call to an API that is paused (or, with Paced, over
// its rate): the request was not sent. Through an http.Client it arrives
// wrapped in a *url.Error; errors.As finds it there.
type PausedError struct {
	API   string
	Until time.Time // when the API may be called again
	Paced bool      // over its rate, rather than paused by a throttled response
}

func (e *PausedError) Error() string {
	why := "paused"
	if e.Paced {
		why = "over its rate"
	}
	return fmt.Sprintf("pause: API %s is %s until %s: request not sent", e.API, why, e.Until.Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrPaused) true.
func (e *PausedError) Is(target error) bool { return target == ErrPaused }

// ErrThrottled matches a *ThrottledError.
var ErrThrottled = errors.New("pause: API throttled")

// ThrottledError carries a throttled response out of code that calls an API,
// so that job middleware can pause the API and release the job.
type ThrottledError struct {
	StatusCode int
	Hint       retryafter.Hint
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("pause: HTTP %d throttled, retry in %s (%s)", e.StatusCode, e.Hint.Wait.Round(time.Millisecond), e.Hint.Source)
}

// Is makes errors.Is(err, ErrThrottled) true.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// Check returns a *ThrottledError when resp is throttled, nil otherwise. It
// reads the start of the body to find hints there (Discord's retry_after,
// GitHub's secondary limits) and puts it back: the caller reads the body
// untouched.
func (ps *Pauses) Check(resp *http.Response) error {
	if resp == nil {
		return nil
	}
	h := ps.Hint(resp, peek(resp))
	if !h.Throttled {
		return nil
	}
	return &ThrottledError{StatusCode: resp.StatusCode, Hint: h}
}

// RunJob runs a job that calls api, and keeps it from calling a paused API:
//
//   - while api is paused, work does not run, and RunJob returns a
//     *jobtype.ReleaseError with the time left plus jitter;
//   - when work returns a *PausedError or a *ThrottledError (anywhere in its
//     chain), the pause is recorded and the job released the same way;
//   - past WithJobDeadline, it returns a *jobtype.DeadlineError instead;
//   - any other error from work is returned untouched, for the queue's own
//     retry rules.
//
// riverlimit and asynqlimit turn the release into a snooze or a non-failure
// retry, which spends no attempt. A store failure while checking lets the
// job run (fail open).
func (ps *Pauses) RunJob(ctx context.Context, api string, job jobtype.Job, work func(context.Context) error) error {
	if api == "" {
		return ErrNoAPIName
	}
	if left, err := ps.Paused(ctx, api); err == nil && left > 0 {
		ps.emit(keycap.Event{Kind: keycap.CallHeld, API: api, Wait: left})
		return ps.release(ctx, api, job, left, &PausedError{API: api, Until: time.Now().Add(left)})
	} else if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	err := work(ctx)
	var pe *PausedError
	var te *ThrottledError
	switch {
	case errors.As(err, &pe):
		return ps.release(ctx, api, job, max(time.Until(pe.Until), 0), err)
	case errors.As(err, &te):
		ps.emit(keycap.Event{Kind: keycap.Throttled, API: api, Status: te.StatusCode, Wait: te.Hint.Wait, Source: te.Hint.Source})
		wait := te.Hint.Wait
		if until, perr := ps.Pause(ctx, api, te.Hint.Wait); perr == nil {
			wait = max(time.Until(until), 0)
		}
		return ps.release(ctx, api, job, wait, err)
	}
	return err
}

// PaceJob runs a job that calls api at the API's rate (WithRate): it takes
// one from the rate, and when none is left it does not run work and returns a
// *jobtype.ReleaseError for the time until one is (plus jitter), so the job
// comes back then without spending an attempt. An API without a rate runs at
// once. Note that the rate counts jobs, and Transport's pacing counts
// requests: pace a job that makes several calls with one of the two, not both.
func (ps *Pauses) PaceJob(ctx context.Context, api string, job jobtype.Job, work func(context.Context) error) error {
	if api == "" {
		return ErrNoAPIName
	}
	wait, err := ps.pace(ctx, api)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if wait > 0 {
		ps.emit(keycap.Event{Kind: keycap.CallHeld, API: api, Wait: wait, Paced: true})
		return ps.release(ctx, api, job, wait, &PausedError{API: api, Until: time.Now().Add(wait), Paced: true})
	}
	return work(ctx)
}

func (ps *Pauses) release(ctx context.Context, api string, job jobtype.Job, wait time.Duration, cause error) error {
	by := "pause:" + api
	if ps.deadline > 0 {
		if err := jobtype.CheckDeadline(ctx, ps.l, by, "", job, ps.deadline, cause); err != nil {
			return err
		}
	}
	return &jobtype.ReleaseError{By: by, Delay: wait + ps.jitterFor(wait), Err: cause}
}

// Respecting returns a Runner that runs jobs calling api with RunJob, for
// queue adapters (riverlimit.RespectPauses, asynqlimit.RespectPauses).
func (ps *Pauses) Respecting(api string) jobtype.Runner {
	return jobtype.RunnerFunc(func(ctx context.Context, job jobtype.Job, work func(context.Context) error) error {
		return ps.RunJob(ctx, api, job, work)
	})
}

// Pacing returns a Runner that runs jobs calling api with PaceJob, for queue
// adapters (riverlimit.PaceJobs, asynqlimit.PaceJobs).
func (ps *Pauses) Pacing(api string) jobtype.Runner {
	return jobtype.RunnerFunc(func(ctx context.Context, job jobtype.Job, work func(context.Context) error) error {
		return ps.PaceJob(ctx, api, job, work)
	})
}

// jitterFor returns a random extra delay for a release of wait.
func (ps *Pauses) jitterFor(wait time.Duration) time.Duration {
	j := ps.jitter
	if j < 0 {
		j = time.Second + wait/10
	}
	if j <= 0 {
		return 0
	}
	return rand.N(j + 1)
}
