package grpclimit_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/grpclimit"
	"github.com/keycap/keycap/rpclimit"
)

// gauge counts the calls in flight per key and keeps the most seen at once.
type gauge struct {
	mu     sync.Mutex
	now    map[string]int
	most   map[string]int
	served int
}

func newGauge() *gauge { return &gauge{now: map[string]int{}, most: map[string]int{}} }

func (g *gauge) enter(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now[key]++
	g.most[key] = max(g.most[key], g.now[key])
	g.served++
}

func (g *gauge) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now[key]--
}

// over returns the keys whose most at once exceeded limit, with that most.
func (g *gauge) over(limit int) map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	bad := map[string]int{}
	for k, n := range g.most {
		if n > limit {
			bad[k] = n
		}
	}
	return bad
}

// service is a TestService whose handlers count themselves in a gauge by
// their x-tenant metadata, and hold for delay or until release is closed
// (neither: they return at once).
type service struct {
	testpb.UnimplementedTestServiceServer
	g       *gauge
	delay   time.Duration
	release chan struct{}       // nil: hold for delay only
	started chan string         // each handler's key as it starts, when not nil
	fail    error               // UnaryCall's answer, when not nil
	fences  chan []keycap.Fence // StreamingOutputCall's fencing tokens, when not nil
}

func tenantOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-tenant"); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (s *service) hold(ctx context.Context) error {
	key := tenantOf(ctx)
	s.g.enter(key)
	defer s.g.leave(key)
	if s.started != nil {
		select {
		case s.started <- key:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.delay == 0 && s.release == nil {
		return nil
	}
	var timer <-chan time.Time
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-timer:
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (s *service) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := s.hold(ctx); err != nil {
		return nil, err
	}
	if s.fail != nil {
		return nil, s.fail
	}
	return &testpb.SimpleResponse{}, nil
}

func (s *service) CacheableUnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

func (s *service) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (s *service) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	if err := ss.Send(&testpb.StreamingOutputCallResponse{}); err != nil { // the stream is open
		return err
	}
	if s.fences != nil {
		select {
		case s.fences <- keycap.FencesFrom(ss.Context()):
		case <-ss.Context().Done():
			return ss.Context().Err()
		}
	}
	return s.hold(ss.Context())
}

func (s *service) FullDuplexCall(ss grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	key := tenantOf(ss.Context())
	s.g.enter(key)
	defer s.g.leave(key)
	for {
		if _, err := ss.Recv(); err != nil {
			return nil // the client closed or went away
		}
		if err := ss.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// serve starts a gRPC server on loopback with limits' interceptors and
// returns a client connection to it.
func serve(t testing.TB, limits *rpclimit.Limiters, svc *service, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if limits != nil {
		opts = append(opts,
			grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limits)),
			grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limits)))
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		if svc.release != nil {
			select {
			case <-svc.release:
			default:
				close(svc.release)
			}
		}
		srv.Stop()
	})
	return dial(t, ln.Addr().String())
}

func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func tenant(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-tenant", key)
}

// flood is a service whose server stream sends until it cannot.
type flood struct {
	testpb.UnimplementedTestServiceServer
	entered chan struct{}
}

func (f *flood) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	f.entered <- struct{}{}
	msg := &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, 64<<10)}}
	for {
		if err := ss.Send(msg); err != nil {
			return err
		}
	}
}
