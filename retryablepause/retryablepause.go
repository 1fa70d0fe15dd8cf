// Package retryablepause puts keycap's shared pauses and its full reading of
// throttling hints inside a hashicorp/go-retryablehttp retry loop. keycap
// grows no back-off engine of its own: go-retryablehttp keeps retrying as it
// does, and keycap makes each of its waits the right one.
//
//	pauses, _ := pause.New(limiter)                 // redisstore: shared by every server
//	client := retryablehttp.NewClient()
//	retryablepause.New(pauses).Configure(client)
//	resp, err := client.Get("https://api.vendor.com/contacts")
//
// Configure sets three things:
//
//   - the client's transport goes through pause.Transport: a 429 anywhere
//     pauses the API for every worker of every server, and a call to an API
//     that is paused is not sent — it answers a 429 made by keycap, whose
//     Retry-After is the time the pause has left;
//   - Backoff waits exactly what a throttled response asks, read from every
//     header form vendors send (package retryafter: decimal seconds, three
//     date forms, RateLimit fields, X-RateLimit-Reset in its many forms,
//     vendor headers, a JSON body's retry_after), where go-retryablehttp's
//     DefaultBackoff reads whole seconds of Retry-After on a 429 or 503
//     only; other failures keep their back-off (DefaultBackoff, or yours);
//   - CheckRetry retries a throttled response only if its wait is at most
//     MaxWait (WithMaxWait, default 30 s, go-retryablehttp's own
//     RetryWaitMax): a longer pause returns the 429 to the caller at once —
//     a job, say, which a riverlimit or asynqlimit middleware then releases
//     without spending an attempt — instead of sleeping in the process; other
//     outcomes keep their policy (DefaultRetryPolicy, or yours).
package retryablepause

import (
	"context"
	"net/http"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/keycap/keycap/pause"
)

// DefaultMaxWait is the longest throttled wait a Policy retries after, unless
// WithMaxWait says otherwise: go-retryablehttp's default RetryWaitMax.
const DefaultMaxWait = 30 * time.Second

// Policy is a go-retryablehttp CheckRetry and Backoff pair over keycap
// pauses.
type Policy struct {
	ps      *pause.Pauses
	maxWait time.Duration
	check   retryablehttp.CheckRetry
	backoff retryablehttp.Backoff
}

// An Option configures a Policy.
type Option struct{ apply func(*Policy) }

// WithMaxWait sets the longest throttled wait the Policy retries after
// (default DefaultMaxWait); a longer one hands the throttled response back.
func WithMaxWait(d time.Duration) Option { return Option{func(p *Policy) { p.maxWait = d }} }

// WithCheckRetry sets the policy for what is not throttled (default
// retryablehttp.DefaultRetryPolicy).
func WithCheckRetry(c retryablehttp.CheckRetry) Option {
	return Option{func(p *Policy) { p.check = c }}
}

// WithBackoff sets the back-off for what is not throttled (default
// retryablehttp.DefaultBackoff).
func WithBackoff(b retryablehttp.Backoff) Option { return Option{func(p *Policy) { p.backoff = b }} }

// New returns a Policy over ps.
func New(ps *pause.Pauses, opts ...Option) *Policy {
	p := &Policy{ps: ps, maxWait: DefaultMaxWait, check: retryablehttp.DefaultRetryPolicy, backoff: retryablehttp.DefaultBackoff}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(p)
		}
	}
	return p
}

// throttled returns the wait of a throttled response, and whether it is one.
func (p *Policy) throttled(resp *http.Response) (time.Duration, bool) {
	if resp == nil {
		return 0, false
	}
	h := p.ps.Hint(resp, nil)
	return h.Wait, h.Throttled
}

// CheckRetry implements retryablehttp.CheckRetry.
func (p *Policy) CheckRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if wait, ok := p.throttled(resp); ok {
		return wait <= p.maxWait, nil
	}
	return p.check(ctx, resp, err)
}

// Backoff implements retryablehttp.Backoff.
func (p *Policy) Backoff(min, max time.Duration, attempt int, resp *http.Response) time.Duration {
	if wait, ok := p.throttled(resp); ok {
		return wait
	}
	return p.backoff(min, max, attempt, resp)
}

// Configure sets c's CheckRetry and Backoff to the Policy's, and its
// HTTPClient's transport to a pause.Transport over the one it has (a pooled
// transport when it has none) that neither waits nor retries in place — the
// client's loop does — and answers a paused call with keycap's own 429.
// opts are added to the transport's.
func (p *Policy) Configure(c *retryablehttp.Client, opts ...pause.TransportOption) {
	c.CheckRetry = p.CheckRetry
	c.Backoff = p.Backoff
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	topts := append([]pause.TransportOption{pause.WithMaxWaitInPlace(0), pause.WithMaxRetries(0), pause.WithRefusalAsResponse()}, opts...)
	c.HTTPClient.Transport = p.ps.Transport(c.HTTPClient.Transport, topts...)
}
