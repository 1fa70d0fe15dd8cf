package connectlimit

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/rpclimit"
)

// A PauseOption configures NewPauseInterceptor.
type PauseOption struct{ apply func(*pauser) }

type pauser struct {
	ps       *pause.Pauses
	api      func(procedure string) string
	maxWait  time.Duration
	unhinted time.Duration
}

// WithAPIName names the API a call belongs to, whose pause it obeys and
// sets: by default its service ("pkg.Service" of "/pkg.Service/Method").
func WithAPIName(fn func(procedure string) string) PauseOption {
	return PauseOption{func(p *pauser) {
		if fn != nil {
			p.api = fn
		}
	}}
}

// WithMaxWaitInPlace lets a call wait for a pause shorter than d (and ending
// before its deadline) instead of failing at once. Default 0.
func WithMaxWaitInPlace(d time.Duration) PauseOption {
	return PauseOption{func(p *pauser) { p.maxWait = max(d, 0) }}
}

// WithUnhintedPause pauses the API for d after a CodeResourceExhausted that
// carries no delay. Default 0: such an error pauses nothing.
func WithUnhintedPause(d time.Duration) PauseOption {
	return PauseOption{func(p *pauser) { p.unhinted = max(d, 0) }}
}

// NewPauseInterceptor returns a client interceptor that obeys a server's
// throttling for every caller on every server sharing ps's store: a
// CodeResourceExhausted with a RetryInfo delay or a grpc-retry-pushback-ms,
// or a CodeUnavailable with a pushback, pauses the call's API for that long.
// While the API is paused calls are not sent: they fail at once with a
// *connect.Error of CodeResourceExhausted, the time left as RetryInfo, in
// which errors.As finds a *pause.PausedError. On a handler it does nothing.
func NewPauseInterceptor(ps *pause.Pauses, opts ...PauseOption) connect.Interceptor {
	p := &pauser{ps: ps, api: rpclimit.Service}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(p)
		}
	}
	return p
}

func (p *pauser) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			return next(ctx, req)
		}
		api := p.api(req.Spec().Procedure)
		if err := p.admit(ctx, api); err != nil {
			return nil, err
		}
		resp, err := next(ctx, req)
		if err != nil {
			p.observe(ctx, api, err)
		}
		return resp, err
	}
}

func (p *pauser) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		api := p.api(spec.Procedure)
		if err := p.admit(ctx, api); err != nil {
			return &refusedConn{StreamingClientConn: next(ctx, spec), err: err}
		}
		return &watchedConn{StreamingClientConn: next(ctx, spec), p: p, ctx: ctx, api: api}
	}
}

func (p *pauser) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// refusedConn is a stream to a paused API: nothing is sent.
type refusedConn struct {
	connect.StreamingClientConn
	err error
}

func (c *refusedConn) Send(any) error       { return c.err }
func (c *refusedConn) Receive(any) error    { return c.err }
func (c *refusedConn) CloseRequest() error  { return nil }
func (c *refusedConn) CloseResponse() error { return nil }

// watchedConn reads the error a stream ends with.
type watchedConn struct {
	connect.StreamingClientConn
	p    *pauser
	ctx  context.Context
	api  string
	seen atomic.Bool // its end was observed: once per stream
}

func (c *watchedConn) Receive(m any) error {
	err := c.StreamingClientConn.Receive(m)
	if err != nil && c.seen.CompareAndSwap(false, true) {
		c.p.observe(c.ctx, c.api, err)
	}
	return err
}

func (p *pauser) admit(ctx context.Context, api string) error {
	err := p.ps.Admit(ctx, api, p.maxWait)
	var pe *pause.PausedError
	if !errors.As(err, &pe) {
		return err
	}
	e := connect.NewError(connect.CodeResourceExhausted, pe)
	if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(max(time.Until(pe.Until), 0))}); err == nil {
		e.AddDetail(d)
	}
	return e
}

// observe pauses api when err says the server is throttled.
func (p *pauser) observe(ctx context.Context, api string, err error) {
	var ce *connect.Error
	if !errors.As(err, &ce) || errors.Is(err, pause.ErrPaused) {
		return
	}
	var delays []time.Duration
	for _, d := range ce.Details() {
		v, err := d.Value()
		if ri, ok := v.(*errdetails.RetryInfo); err == nil && ok && ri.GetRetryDelay().CheckValid() == nil {
			delays = append(delays, ri.GetRetryDelay().AsDuration())
		}
	}
	if wait := rpclimit.Throttled(rpclimit.Code(ce.Code()), ce.Meta().Values(rpclimit.PushbackHeader), delays, p.unhinted); wait > 0 {
		_, _ = p.ps.Pause(context.WithoutCancel(ctx), api, wait)
	}
}
