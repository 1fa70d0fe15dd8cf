// Package failsafepause puts keycap's shared pauses and its full reading of
// throttling hints inside a failsafe-go retry policy. keycap grows no
// back-off engine of its own: failsafe-go keeps retrying as it does, and
// keycap makes each of its waits the right one.
//
//	pauses, _ := pause.New(limiter) // redisstore: shared by every server
//	policy := failsafepause.NewRetryPolicyBuilder(pauses).WithMaxRetries(5).Build()
//	client := &http.Client{Transport: failsafehttp.NewRoundTripper(failsafepause.Transport(pauses, nil), policy)}
//
// The policy is failsafehttp.NewRetryPolicyBuilder's (it retries errors, 429
// and most 5xx), with keycap's delay — the wait a throttled response asks,
// read from every header form vendors send (package retryafter), where
// failsafehttp.DelayFunc reads whole seconds of Retry-After on a 429 or 503
// only — and an abort for a throttled wait longer than MaxWait, which hands
// the throttled response back at once (a job then released by riverlimit or
// asynqlimit without spending an attempt) rather than sleeping in the
// process. Transport puts pause.Transport under the policy: a 429 pauses the
// API for every worker of every server, and a call to a paused API is not
// sent but answers keycap's own 429, whose Retry-After is the time the pause
// has left.
package failsafepause

import (
	"net/http"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/keycap/keycap/pause"
)

// DefaultMaxWait is the longest throttled wait the policy retries after,
// unless WithMaxWait says otherwise.
const DefaultMaxWait = 30 * time.Second

// An Option configures the policy builder.
type Option struct{ apply func(*config) }

type config struct{ maxWait time.Duration }

// WithMaxWait sets the longest throttled wait the policy retries after
// (default DefaultMaxWait); a longer one aborts, handing the throttled
// response back.
func WithMaxWait(d time.Duration) Option { return Option{func(c *config) { c.maxWait = d }} }

// DelayFunc returns a failsafe-go delay function that waits what a throttled
// response asks (every form package retryafter reads), and -1 (the policy's
// own delay) for anything else.
func DelayFunc(ps *pause.Pauses) failsafe.DelayFunc[*http.Response] {
	return func(exec failsafe.ExecutionAttempt[*http.Response]) time.Duration {
		if resp := exec.LastResult(); resp != nil {
			if h := ps.Hint(resp, nil); h.Throttled {
				return h.Wait
			}
		}
		return -1
	}
}

// NewRetryPolicyBuilder returns failsafehttp.NewRetryPolicyBuilder() with
// keycap's delay (DelayFunc) and an abort for throttled waits past MaxWait.
// Refine it as any failsafe-go builder (WithMaxRetries, WithBackoff, ...).
func NewRetryPolicyBuilder(ps *pause.Pauses, opts ...Option) retrypolicy.Builder[*http.Response] {
	c := config{maxWait: DefaultMaxWait}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	return failsafehttp.NewRetryPolicyBuilder().
		WithDelayFunc(DelayFunc(ps)).
		AbortIf(func(resp *http.Response, _ error) bool {
			if resp == nil {
				return false
			}
			h := ps.Hint(resp, nil)
			return h.Throttled && h.Wait > c.maxWait
		}).
		ReturnLastFailure()
}

// Transport returns a pause.Transport over next (http.DefaultTransport when
// nil) for use under a failsafe-go policy: it neither waits nor retries in
// place (the policy does), and answers a call to a paused API with keycap's
// own 429. opts are added to its options.
func Transport(ps *pause.Pauses, next http.RoundTripper, opts ...pause.TransportOption) *pause.Transport {
	return ps.Transport(next, append([]pause.TransportOption{pause.WithMaxWaitInPlace(0), pause.WithMaxRetries(0), pause.WithRefusalAsResponse()}, opts...)...)
}
