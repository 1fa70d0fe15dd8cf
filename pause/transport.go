package pause

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keycap/keycap"
)

// Defaults of a Transport.
const (
	DefaultMaxWaitInPlace = 5 * time.Second
	DefaultMaxRetries     = 3
	peekSize              = 4096
)

// Transport is an http.RoundTripper that keeps every caller, on every server,
// away from a throttled API. For each request, to the API its name function
// gives (the request's host by default):
//
//   - while the API is paused (or over its rate, with WithRate), the request
//     waits in place if the wait is short (WithMaxWaitInPlace, default 5 s)
//     and fits the request context's deadline; otherwise it is refused
//     without being sent, with a *PausedError carrying the API and the time
//     it resumes (wrapped in a *url.Error by http.Client; errors.As finds
//     it);
//   - a throttled response pauses the API for the wait it announces (a later
//     short 429 never shortens a longer pause), and a response that says
//     nothing remains pauses it until its reset, before any 429;
//   - a throttled request is sent again in place only when the wait is short,
//     fits the context's deadline, the method is idempotent (GET, HEAD,
//     OPTIONS, TRACE, PUT, DELETE, or any request with an Idempotency-Key
//     header; WithRetryAnyMethod for the rest) and the body can be replayed
//     (no body, or Request.GetBody set, as http.NewRequest does for in-memory
//     bodies). Otherwise the throttled response is returned to the caller
//     untouched, its body included.
//
// Waits in place end early when the request's context does.
type Transport struct {
	ps         *Pauses
	next       http.RoundTripper
	api        func(*http.Request) string
	maxWait    time.Duration
	anyMethod  bool
	maxRetries int
	asResponse bool
	limit      func(api string) (keycap.Limit, bool) // WithConcurrency; nil: no cap
}

// A TransportOption configures a Transport.
type TransportOption struct{ apply func(*Transport) }

// WithAPIName sets how a request names its API: the pause and the pace are
// shared by every request with the same name. Default: the request's host.
// Use one name per credential for a vendor that limits per token. A request
// whose name is empty is refused with an error matching ErrNoAPIName.
func WithAPIName(fn func(*http.Request) string) TransportOption {
	return TransportOption{func(t *Transport) { t.api = fn }}
}

// WithMaxWaitInPlace sets the longest wait a request may spend in place
// (default DefaultMaxWaitInPlace); 0 never waits in place.
func WithMaxWaitInPlace(d time.Duration) TransportOption {
	return TransportOption{func(t *Transport) { t.maxWait = max(d, 0) }}
}

// WithRetryAnyMethod lets non-idempotent requests (POST, PATCH) be sent again
// after a throttled response, for APIs that refuse throttled requests before
// acting on them.
func WithRetryAnyMethod() TransportOption {
	return TransportOption{func(t *Transport) { t.anyMethod = true }}
}

// WithRefusalAsResponse makes a call refused because its API is paused (or
// over its rate) answer with a 429 made by the transport — never sent — with
// Retry-After and Retry-After-Ms set to the time left and X-Keycap-Paused
// naming the API, instead of failing with a *PausedError: for retry
// libraries that decide on responses (go-retryablehttp, failsafe-go; see
// packages retryablepause and failsafepause), which then wait the pause out
// and try again.
func WithRefusalAsResponse() TransportOption {
	return TransportOption{func(t *Transport) { t.asResponse = true }}
}

// WithConcurrency caps the calls in flight to each API with a keycap limit
// — limit returns it for an API's name, or false for no cap — on every
// server that shares the store: a call holds a slot from before it is sent
// until its response's body is closed (or it fails). Give the limit an
// adaptive parent (keycap.WithAdaptive) to find a vendor's hidden
// concurrency: a throttled answer (what the hint parser reads as
// throttled), a 429, 503, 504 or 529 (keycap.OverloadStatus), and a call
// that timed out are reported as
// overloads (Lease.Overloaded), which cut the total, and the total grows
// again while calls fill it. The pause and the pace apply as without it,
// before the slot is taken. A call the limit refuses (keycap.ErrLimitExceeded
// once its Spec.Wait has passed) fails unsent with that error.
func WithConcurrency(limit func(api string) (keycap.Limit, bool)) TransportOption {
	return TransportOption{func(t *Transport) { t.limit = limit }}
}

// WithMaxRetries bounds how many times one request is sent again in place
// (default DefaultMaxRetries).
func WithMaxRetries(n int) TransportOption {
	return TransportOption{func(t *Transport) { t.maxRetries = max(n, 0) }}
}

// Transport returns a RoundTripper over next (http.DefaultTransport when
// nil).
func (ps *Pauses) Transport(next http.RoundTripper, opts ...TransportOption) *Transport {
	if next == nil {
		next = http.DefaultTransport
	}
	t := &Transport{
		ps: ps, next: next,
		api:        func(r *http.Request) string { return r.URL.Host },
		maxWait:    DefaultMaxWaitInPlace,
		maxRetries: DefaultMaxRetries,
	}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(t)
		}
	}
	return t
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	api := t.api(req)
	if api == "" {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("%w for a request to %s: WithAPIName must name every request's API", ErrNoAPIName, req.URL.Redacted())
	}
	for attempt := 0; ; attempt++ {
		if err := t.ps.Admit(ctx, api, t.maxWait); err != nil {
			if req.Body != nil {
				_ = req.Body.Close() // a RoundTripper closes the body, even on error
			}
			var pe *PausedError
			if t.asResponse && errors.As(err, &pe) {
				return refusal(req, pe), nil
			}
			return nil, err
		}
		r := req
		if attempt > 0 {
			var err error
			if r, err = rewind(req); err != nil {
				return nil, err
			}
		}
		lease, err := t.slot(ctx, api)
		if err != nil {
			if r.Body != nil {
				_ = r.Body.Close()
			}
			return nil, err
		}
		resp, err := t.next.RoundTrip(r)
		if err != nil {
			if lease != nil && (isTimeout(err) || errors.Is(err, context.DeadlineExceeded)) {
				lease.Overloaded()
			}
			lease.Release()
			return nil, err
		}
		h := t.ps.Hint(resp, peek(resp))
		if lease != nil {
			if h.Throttled || keycap.OverloadStatus(resp.StatusCode) {
				lease.Overloaded()
			}
			resp.Body = &releaseOnClose{ReadCloser: resp.Body, lease: lease}
		}
		switch {
		case h.Exhausted:
			t.ps.emit(keycap.Event{Kind: keycap.Exhausted, API: api, Wait: h.Wait, Source: h.Source})
			_, _ = t.ps.Pause(ctx, api, h.Wait)
			return resp, nil
		case !h.Throttled:
			return resp, nil
		}
		t.ps.emit(keycap.Event{Kind: keycap.Throttled, API: api, Status: resp.StatusCode, Wait: h.Wait, Source: h.Source})
		wait := h.Wait
		if until, err := t.ps.Pause(ctx, api, h.Wait); err == nil {
			wait = max(time.Until(until), 0)
		}
		if attempt >= t.maxRetries || !canWait(ctx, wait, t.maxWait) || !t.canResend(req) {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
		t.ps.emit(keycap.Event{Kind: keycap.CallRetried, API: api, Wait: wait})
	}
}

// slot takes a slot of api's limit (WithConcurrency); nil when it has none.
func (t *Transport) slot(ctx context.Context, api string) (*keycap.Lease, error) {
	if t.limit == nil {
		return nil, nil
	}
	lim, ok := t.limit(api)
	if !ok {
		return nil, nil
	}
	return t.ps.l.Acquire(ctx, lim)
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// releaseOnClose releases a call's slot when its response's body is closed.
type releaseOnClose struct {
	io.ReadCloser
	lease *keycap.Lease
	once  sync.Once
}

func (b *releaseOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.lease.Release)
	return err
}

// Admit returns once api may be called: at once when it is neither paused
// nor over its rate (WithRate: it takes one from the rate), after a wait in
// place of at most maxWait that ends before ctx's deadline, or with a
// *PausedError. A store that cannot answer lets the call go (fail open).
// Transport calls it before each request; a front door of another protocol
// (grpclimit's client interceptors) calls it before each call.
func (ps *Pauses) Admit(ctx context.Context, api string, maxWait time.Duration) error {
	for {
		left, err := ps.Paused(ctx, api)
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		paced := false
		if left == 0 {
			if left, err = ps.pace(ctx, api); err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			paced = true
		}
		if left == 0 {
			return nil
		}
		if !canWait(ctx, left, maxWait) {
			ps.emit(keycap.Event{Kind: keycap.CallHeld, API: api, Wait: left, Paced: paced})
			return &PausedError{API: api, Until: time.Now().Add(left), Paced: paced}
		}
		if err := sleep(ctx, left); err != nil {
			return err
		}
	}
}

// refusal is the 429 that stands for a call refused unsent (a paused or
// paced API), with WithRefusalAsResponse.
func refusal(req *http.Request, pe *PausedError) *http.Response {
	// Rounded up, and a millisecond more, so that a retry after it finds
	// the pause over rather than a last sliver of it.
	ms := (max(time.Until(pe.Until), 0)+time.Millisecond-1)/time.Millisecond + 1
	h := http.Header{}
	h.Set("Retry-After", strconv.FormatInt(int64((ms+999)/1000), 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(int64(ms), 10))
	h.Set("X-Keycap-Paused", pe.API)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	body := pe.Error() + "\n"
	return &http.Response{
		Status:     "429 Too Many Requests",
		StatusCode: http.StatusTooManyRequests,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// canWait reports whether a wait of d may be spent in place: it is at most
// maxWait and ends before ctx's deadline.
func canWait(ctx context.Context, d, maxWait time.Duration) bool {
	if d > maxWait {
		return false
	}
	deadline, ok := ctx.Deadline()
	return !ok || time.Now().Add(d).Before(deadline)
}

// canResend reports whether req may be sent again.
func (t *Transport) canResend(req *http.Request) bool {
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	if !replayable {
		return false
	}
	if t.anyMethod || req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != "" {
		return true
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// rewind returns a copy of req with a fresh body, to send it again.
func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	return r, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// peek reads the start of the body of a response that may carry its hint
// there (429, 403, 503, 529), and puts it back so that the caller reads the
// body untouched.
func peek(resp *http.Response) []byte {
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusForbidden, http.StatusServiceUnavailable, 529:
	default:
		return nil
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	buf, _ := io.ReadAll(io.LimitReader(resp.Body, peekSize))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), resp.Body), resp.Body}
	return buf
}
