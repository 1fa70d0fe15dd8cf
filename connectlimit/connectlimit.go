// Package connectlimit caps the Connect RPCs in flight per user, tenant or
// key, and pauses a client's calls to a throttled service everywhere:
// connectrpc.com/connect interceptors on keycap's leased slots and shared
// pauses, over the Connect, gRPC and gRPC-Web protocols alike.
//
// The rules are rpclimit's; the handler interceptor applies them:
//
//	limits, _ := rpclimit.New(limiter)
//	limits.Set("/export.v1.ExportService/*", rpclimit.Max(2).ByMetadata("x-tenant"))
//	path, handler := exportv1connect.NewExportServiceHandler(svc,
//		connect.WithInterceptors(connectlimit.NewInterceptor(limits)))
//
// A refused call ends with CodeResourceExhausted, a google.rpc.RetryInfo
// detail and the grpc-retry-pushback-ms metadata (1 s unless the limit sets
// another), and a Retry-After in whole seconds for plain HTTP clients of
// the Connect protocol. A store failure lets the call run (fail open) or
// ends it with CodeUnavailable (fail closed), per limit; a call without its
// key's metadata follows the limit's rpclimit.Missing. A stream holds its
// slot for its whole life, until its handler returns.
//
// NewPauseInterceptor is the client side: a throttled answer pauses its
// service for every caller on every server (package pause), and calls
// during the pause fail fast, unsent.
package connectlimit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/rpclimit"
)

// NewInterceptor returns a handler interceptor that caps calls with limits:
// each call holds a slot of every limit its procedure's rule returns while
// its handler runs. On a client it does nothing.
func NewInterceptor(limits *rpclimit.Limiters) connect.Interceptor {
	return &interceptor{limits: limits}
}

type interceptor struct{ limits *rpclimit.Limiters }

func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		c := rpclimit.Call{Procedure: req.Spec().Procedure, Peer: peerAddr(req.Peer()), Metadata: metadataOf(req.Header())}
		var resp connect.AnyResponse
		var err error
		if refused := i.limits.Run(ctx, &c, func(ctx context.Context) {
			resp, err = next(ctx, req)
			overload(ctx, err)
		}); refused != nil {
			r := asRefusal(refused)
			return nil, Error(r)
		}
		return resp, err
	}
}

func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c := rpclimit.Call{Procedure: conn.Spec().Procedure, Stream: true, Peer: peerAddr(conn.Peer()), Metadata: metadataOf(conn.RequestHeader())}
		var err error
		if refused := i.limits.Run(ctx, &c, func(ctx context.Context) {
			err = next(ctx, conn)
			overload(ctx, err)
		}); refused != nil {
			r := asRefusal(refused)
			return Error(r)
		}
		return err
	}
}

// metadataOf reads a call's metadata as grpc-go gives it: binary metadata
// (a name ending in -bin) decoded, so that a key counts in the same pool
// whichever door a call comes through.
func metadataOf(h http.Header) func(name string) []string {
	return func(name string) []string {
		v := h.Values(name)
		if !strings.HasSuffix(strings.ToLower(name), "-bin") {
			return v
		}
		out := make([]string, 0, len(v))
		for _, s := range v {
			if b, err := connect.DecodeBinaryHeader(s); err == nil {
				out = append(out, string(b))
			}
		}
		return out
	}
}

// peerAddr is Connect's peer as the net.Addr rpclimit reads: nil when
// unknown.
func peerAddr(p connect.Peer) net.Addr {
	if p.Addr == "" {
		return nil
	}
	return address{p.Protocol, p.Addr}
}

type address struct{ protocol, addr string }

func (a address) Network() string { return "tcp" }
func (a address) String() string  { return a.addr }

// Error returns the *connect.Error a refused call ends with: the refusal's
// code and message; when it asks for a delay, a RetryInfo detail, the
// grpc-retry-pushback-ms metadata and a Retry-After in whole seconds.
// errors.As finds r, and what refused the call, in it.
func Error(r *rpclimit.Refusal) *connect.Error {
	e := connect.NewError(connect.Code(r.Code), &refused{r})
	if v, ok := r.Pushback(); ok {
		if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)}); err == nil {
			e.AddDetail(d)
		}
		e.Meta().Set(rpclimit.PushbackHeader, v)
		e.Meta().Set("Retry-After", strconv.FormatInt(int64((r.RetryAfter+time.Second-1)/time.Second), 10))
	}
	return e
}

// refused carries the refusal's message to the client and the refusal
// itself to errors.As.
type refused struct{ r *rpclimit.Refusal }

func (e *refused) Error() string { return e.r.Message }

func (e *refused) Unwrap() error { return e.r }

// asRefusal returns the *rpclimit.Refusal Run returned.
func asRefusal(err error) *rpclimit.Refusal {
	var r *rpclimit.Refusal
	if !errors.As(err, &r) { // Run returns nothing else; a refusal all the same
		r = &rpclimit.Refusal{Code: rpclimit.Internal, Message: "refused", Err: err}
	}
	return r
}

// overload reports a handler's overload answer to the adaptive parents of
// the call's lease, which ctx carries.
func overload(ctx context.Context, err error) {
	if err != nil && rpclimit.Overload(rpclimit.Code(connect.CodeOf(err))) {
		keycap.ReportOverload(ctx)
	}
}
