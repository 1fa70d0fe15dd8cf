package grpclimit

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/rpclimit"
)

// A ClientOption configures the client interceptors.
type ClientOption struct{ apply func(*client) }

type client struct {
	ps       *pause.Pauses
	api      func(method string) string
	maxWait  time.Duration
	unhinted time.Duration
}

// WithAPIName names the API a call belongs to, whose pause it obeys and
// sets: by default its service ("pkg.Service" of "/pkg.Service/Method"), so
// that one throttled method pauses its whole service. Name it after the
// vendor or the target when several share a service name.
func WithAPIName(fn func(method string) string) ClientOption {
	return ClientOption{func(c *client) {
		if fn != nil {
			c.api = fn
		}
	}}
}

// WithMaxWaitInPlace lets a call wait for a pause shorter than d (and ending
// before its deadline) instead of failing at once. Default 0: calls during
// a pause fail fast.
func WithMaxWaitInPlace(d time.Duration) ClientOption {
	return ClientOption{func(c *client) { c.maxWait = max(d, 0) }}
}

// WithUnhintedPause pauses the API for d after a RESOURCE_EXHAUSTED that
// carries no delay (no RetryInfo, no pushback). Default 0: such a status,
// which grpc-go also gives for a message over its size limit, pauses
// nothing.
func WithUnhintedPause(d time.Duration) ClientOption {
	return ClientOption{func(c *client) { c.unhinted = max(d, 0) }}
}

func newClient(ps *pause.Pauses, opts []ClientOption) *client {
	c := &client{ps: ps, api: rpclimit.Service}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(c)
		}
	}
	return c
}

// UnaryClientInterceptor makes a throttled answer pause its API for every
// caller on every server that shares ps's store, as pause.Transport does for
// HTTP 429s: a RESOURCE_EXHAUSTED with a google.rpc.RetryInfo delay or a
// grpc-retry-pushback-ms trailer, or an UNAVAILABLE with a pushback, pauses
// the API for that long. While the API is paused, calls are not sent: they
// fail at once with a status error of code RESOURCE_EXHAUSTED and the time
// left as RetryInfo, in which errors.As finds a *pause.PausedError.
//
// Put it outside (before) any retrying interceptor, and let grpc-go's own
// retry policy, which obeys the pushback, retry within a call.
func UnaryClientInterceptor(ps *pause.Pauses, opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := newClient(ps, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		api := c.api(method)
		if err := c.admit(ctx, api); err != nil {
			return err
		}
		var trailer metadata.MD
		// Clipped: callOpts may be the connection's defaults, shared by every
		// call; an append must not write into their spare capacity.
		err := invoker(ctx, method, req, reply, cc, append(slices.Clip(callOpts), grpc.Trailer(&trailer))...)
		if err != nil {
			c.observe(ctx, api, err, trailer)
		}
		return err
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams: a paused
// API's stream is not opened, and a stream that ends throttled pauses its
// API.
func StreamClientInterceptor(ps *pause.Pauses, opts ...ClientOption) grpc.StreamClientInterceptor {
	c := newClient(ps, opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		api := c.api(method)
		if err := c.admit(ctx, api); err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil {
			c.observe(ctx, api, err, nil)
			return nil, err
		}
		return &watchedStream{ClientStream: cs, c: c, api: api}, nil
	}
}

// watchedStream reads the status a stream ends with.
type watchedStream struct {
	grpc.ClientStream
	c    *client
	api  string
	seen atomic.Bool // its end was observed: once per stream
}

func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && err != io.EOF && s.seen.CompareAndSwap(false, true) {
		s.c.observe(s.Context(), s.api, err, s.Trailer())
	}
	return err
}

// admit returns nil when api may be called, else the error a paused call
// fails with.
func (c *client) admit(ctx context.Context, api string) error {
	err := c.ps.Admit(ctx, api, c.maxWait)
	var pe *pause.PausedError
	if !errors.As(err, &pe) {
		return err // nil, or the context's error
	}
	return &pausedError{pe: pe}
}

// observe pauses api when err says the server is throttled.
func (c *client) observe(ctx context.Context, api string, err error, trailer metadata.MD) {
	st, ok := status.FromError(err)
	if !ok || errors.As(err, new(*pausedError)) {
		return
	}
	var delays []time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().CheckValid() == nil {
			delays = append(delays, ri.GetRetryDelay().AsDuration())
		}
	}
	if wait := rpclimit.Throttled(rpclimit.Code(st.Code()), trailer.Get(rpclimit.PushbackHeader), delays, c.unhinted); wait > 0 {
		// The caller's context may be over (the call failed); the pause
		// must still reach the store, within the Limiter's decision budget.
		_, _ = c.ps.Pause(context.WithoutCancel(ctx), api, wait)
	}
}

// pausedError refuses a call to a paused API: a status error of code
// RESOURCE_EXHAUSTED with the time left as RetryInfo, which unwraps to the
// *pause.PausedError.
type pausedError struct{ pe *pause.PausedError }

func (e *pausedError) Error() string { return e.GRPCStatus().Err().Error() }

func (e *pausedError) Unwrap() error { return e.pe }

// GRPCStatus is how status.FromError and status.Code read the error.
func (e *pausedError) GRPCStatus() *status.Status {
	st := status.New(codes.ResourceExhausted, e.pe.Error())
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(max(time.Until(e.pe.Until), 0))}); err == nil {
		st = d
	}
	return st
}
