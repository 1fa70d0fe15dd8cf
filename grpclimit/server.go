package grpclimit

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/rpclimit"
)

// UnaryServerInterceptor caps unary calls with limits: each call holds a
// slot of every limit its procedure's rule returns while its handler runs.
// A refused call gets the status of Status, with the pushback trailer.
func UnaryServerInterceptor(limits *rpclimit.Limiters) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c := call(ctx, info.FullMethod, false)
		var resp any
		var err error
		if refused := limits.Run(ctx, &c, func(ctx context.Context) {
			resp, err = handler(ctx, req)
			overload(ctx, err)
		}); refused != nil {
			r := asRefusal(refused)
			if v, ok := r.Pushback(); ok {
				_ = grpc.SetTrailer(ctx, metadata.Pairs(rpclimit.PushbackHeader, v))
			}
			return nil, Error(r)
		}
		return resp, err
	}
}

// StreamServerInterceptor caps streams with limits: a stream holds a slot of
// every limit its procedure's rule returns for its whole life, renewed, and
// gives them back when its handler returns (after its last message, or
// once it sees the client cancel, the deadline pass or the connection die).
func StreamServerInterceptor(limits *rpclimit.Limiters) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		c := call(ss.Context(), info.FullMethod, true)
		var err error
		if refused := limits.Run(ss.Context(), &c, func(ctx context.Context) {
			stream := ss
			if ctx != ss.Context() { // it carries the lease: FencesFrom, ReportOverload
				stream = &leaseStream{ServerStream: ss, ctx: ctx}
			}
			err = handler(srv, stream)
			overload(ctx, err)
		}); refused != nil {
			r := asRefusal(refused)
			if v, ok := r.Pushback(); ok {
				ss.SetTrailer(metadata.Pairs(rpclimit.PushbackHeader, v))
			}
			return Error(r)
		}
		return err
	}
}

// leaseStream is a stream whose context carries the call's lease.
type leaseStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *leaseStream) Context() context.Context { return s.ctx }

// overload reports a handler's overload answer to the adaptive parents of
// the call's lease, which ctx carries.
func overload(ctx context.Context, err error) {
	if err != nil && rpclimit.Overload(rpclimit.Code(status.Code(err))) {
		keycap.ReportOverload(ctx)
	}
}

// call describes a call to rpclimit from its context: its peer and its
// incoming metadata.
func call(ctx context.Context, method string, stream bool) rpclimit.Call {
	c := rpclimit.Call{Procedure: method, Stream: stream}
	if p, ok := peer.FromContext(ctx); ok {
		c.Peer = p.Addr
	}
	// One value looked up in place: FromIncomingContext would copy the
	// whole metadata for each call.
	// Keys are lower case in grpc-go's metadata: a name asked in another
	// case (X-Forwarded-For) would make it scan every key.
	c.Metadata = func(name string) []string { return metadata.ValueFromIncomingContext(ctx, strings.ToLower(name)) }
	return c
}

// Status returns the gRPC status of a refusal: its code and message, and,
// when it asks for a delay, a google.rpc.RetryInfo detail carrying it.
func Status(r *rpclimit.Refusal) *status.Status {
	st := status.New(codes.Code(r.Code), r.Message)
	if r.RetryAfter > 0 {
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)}); err == nil {
			st = d
		}
	}
	return st
}

// Error returns the error a refused call ends with: its gRPC status is
// Status(r), and errors.As finds r, and what refused the call, in it.
func Error(r *rpclimit.Refusal) error { return &refusedError{r: r, st: Status(r)} }

type refusedError struct {
	r  *rpclimit.Refusal
	st *status.Status
}

func (e *refusedError) Error() string { return e.st.Err().Error() }

// GRPCStatus is how grpc-go finds the status to send.
func (e *refusedError) GRPCStatus() *status.Status { return e.st }

func (e *refusedError) Unwrap() error { return e.r }

// asRefusal returns the *rpclimit.Refusal Run returned.
func asRefusal(err error) *rpclimit.Refusal {
	var r *rpclimit.Refusal
	if !errors.As(err, &r) { // Run returns nothing else; a refusal all the same
		r = &rpclimit.Refusal{Code: rpclimit.Internal, Message: "refused", Err: err}
	}
	return r
}
