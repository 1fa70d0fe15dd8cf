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
// Hints are read by package retryafter: every header form vendors send.
package pause

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/retryafter"
)

// Pauses keeps the pauses and paces of APIs in a keycap store.
type Pauses struct {
	store    keycap.Pauser
	pacer    keycap.Pacer // nil if the store does not pace
	marks    keycap.Marker
	parser   retryafter.Parser
	rates    func(api string) (keycap.Rate, bool)
	observer Observer
	jitter   time.Duration
	deadline time.Duration
	outage   atomic.Bool
}

// An Option configures Pauses.
type Option func(*Pauses) error

// WithParser sets how responses are read: the wait of a throttled response
// without a hint (default 60 s) and the cap on any wait (default 24 h).
func WithParser(p retryafter.Parser) Option {
	return func(ps *Pauses) error { ps.parser = p; return nil }
}

// WithObserver sends events (throttled responses, pauses, refusals, in-place
// retries, store failures) to o. promobserver.NewPauseMetrics exports them.
func WithObserver(o Observer) Option { return func(ps *Pauses) error { ps.observer = o; return nil } }

// WithRate paces calls to APIs: rates(api) returns the API's published rate,
// or false for none. Every worker of every server shares the pace.
func WithRate(rates func(api string) (keycap.Rate, bool)) Option {
	return func(ps *Pauses) error {
		if ps.pacer == nil {
			return errors.New("pause: WithRate: the store does not pace (keycap.Pacer)")
		}
		ps.rates = rates
		return nil
	}
}

// WithJitter sets the random extra delay added to a released job's wait, so
// that jobs paused together do not come back together. Default: 1 s plus a
// tenth of the wait, drawn at random up to that.
func WithJitter(d time.Duration) Option {
	return func(ps *Pauses) error {
		if d < 0 {
			return &keycap.InvalidLimitError{Field: "jitter", Value: d.String(), Reason: "must be at least 0"}
		}
		ps.jitter = d
		return nil
	}
}

// WithJobDeadline bounds how long a job may keep being released for
// throttling, from the first time it was: past it, the job fails with a
// *joblimit.DeadlineError through the queue's normal failure path. The
// releases never spend attempts, so the deadline, not a count, bounds them.
// Default: no bound.
func WithJobDeadline(d time.Duration) Option {
	return func(ps *Pauses) error {
		if d < 0 {
			return &keycap.InvalidLimitError{Field: "job deadline", Value: d.String(), Reason: "must be at least 0"}
		}
		if d > 0 && ps.marks == nil {
			return errors.New("pause: WithJobDeadline: the store keeps no marks (keycap.Marker)")
		}
		ps.deadline = d
		return nil
	}
}

// New returns the pauses kept in store, which must implement keycap.Pauser
// (memstore and redisstore do).
func New(store keycap.Store, opts ...Option) (*Pauses, error) {
	ps := &Pauses{jitter: -1}
	var ok bool
	if ps.store, ok = store.(keycap.Pauser); !ok {
		return nil, fmt.Errorf("pause: the store %T keeps no pauses (keycap.Pauser)", store)
	}
	ps.pacer, _ = store.(keycap.Pacer)
	ps.marks, _ = store.(keycap.Marker)
	for _, o := range opts {
		if err := o(ps); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

func id(api string) keycap.PoolID { return keycap.NewPoolID("keycap:pause", api) }

// Pause pauses api for at least d: a longer pause already running is kept.
// It returns when the pause now ends.
func (ps *Pauses) Pause(ctx context.Context, api string, d time.Duration) (time.Time, error) {
	left, err := ps.store.Pause(ctx, id(api), d)
	if err != nil {
		ps.failed(api, err)
		return time.Time{}, err
	}
	ps.answered()
	if left > 0 {
		ps.emit(Event{Kind: Paused, API: api, Wait: left})
	}
	return time.Now().Add(left), nil
}

// Paused returns how long api remains paused (0: it is not). A store failure
// is reported once per outage and returned.
func (ps *Pauses) Paused(ctx context.Context, api string) (time.Duration, error) {
	left, err := ps.store.Paused(ctx, id(api))
	if err != nil {
		if ctx.Err() == nil {
			ps.failed(api, err)
		}
		return 0, err
	}
	ps.answered()
	return left, nil
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
	wait, err := ps.pacer.Pace(ctx, keycap.NewPoolID("keycap:pace", api), rate)
	if err != nil {
		if ctx.Err() == nil {
			ps.failed(api, err)
		}
		return 0, err
	}
	ps.answered()
	return wait, nil
}

// Hint reads a response with the Pauses' parser; body is its start, or nil.
func (ps *Pauses) Hint(resp *http.Response, body []byte) retryafter.Hint {
	return ps.parser.Parse(resp.StatusCode, resp.Header, body)
}

func (ps *Pauses) emit(e Event) {
	if ps.observer != nil {
		ps.observer.ObservePause(e)
	}
}

func (ps *Pauses) failed(api string, err error) {
	if ps.outage.CompareAndSwap(false, true) {
		ps.emit(Event{Kind: StoreFailed, API: api, Err: err})
	}
}

func (ps *Pauses) answered() {
	if ps.outage.Load() && ps.outage.CompareAndSwap(true, false) {
		ps.emit(Event{Kind: StoreRecovered})
	}
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
//     *joblimit.ReleaseError with the time left plus jitter;
//   - when work returns a *PausedError or a *ThrottledError (anywhere in its
//     chain), the pause is recorded and the job released the same way;
//   - past WithJobDeadline, it returns a *joblimit.DeadlineError instead;
//   - any other error from work is returned untouched, for the queue's own
//     retry rules.
//
// riverlimit and asynqlimit turn the release into a snooze or a non-failure
// retry, which spends no attempt. A store failure while checking lets the
// job run (fail open).
func (ps *Pauses) RunJob(ctx context.Context, api string, job joblimit.Job, work func(context.Context) error) error {
	if left, err := ps.Paused(ctx, api); err == nil && left > 0 {
		ps.emit(Event{Kind: Refused, API: api, Wait: left})
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
		ps.emit(Event{Kind: Throttled, API: api, Status: te.StatusCode, Wait: te.Hint.Wait, Source: te.Hint.Source})
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
// *joblimit.ReleaseError for the time until one is (plus jitter), so the job
// comes back then without spending an attempt. An API without a rate runs at
// once. Note that the rate counts jobs, and Transport's pacing counts
// requests: pace a job that makes several calls with one of the two, not both.
func (ps *Pauses) PaceJob(ctx context.Context, api string, job joblimit.Job, work func(context.Context) error) error {
	wait, err := ps.pace(ctx, api)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if wait > 0 {
		ps.emit(Event{Kind: Refused, API: api, Wait: wait, Paced: true})
		return ps.release(ctx, api, job, wait, &PausedError{API: api, Until: time.Now().Add(wait), Paced: true})
	}
	return work(ctx)
}

func (ps *Pauses) release(ctx context.Context, api string, job joblimit.Job, wait time.Duration, cause error) error {
	pool := "pause:" + api
	if ps.deadline > 0 {
		if err := joblimit.CheckDeadline(ctx, ps.marks, pool, "", job, ps.deadline, cause); err != nil {
			return err
		}
	}
	return &joblimit.ReleaseError{Pool: pool, Delay: wait + ps.jitterFor(wait), Err: cause}
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
