package grpclimit_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/grpclimit"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/rpclimit"
)

// benchService answers UnaryCall after delay and a server stream with one
// message.
type benchService struct {
	testpb.UnimplementedTestServiceServer
	delay time.Duration
}

func (s *benchService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	return &testpb.SimpleResponse{}, nil
}

func (s *benchService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	return ss.Send(&testpb.StreamingOutputCallResponse{})
}

// allow is what go-grpc-middleware's ratelimit interceptor is given in
// practice: a token bucket, here one that never runs out, so that only the
// interceptor's and the bucket's own cost is measured.
type allow struct{ *rate.Limiter }

func (a allow) Limit(context.Context) error {
	if !a.Allow() {
		return fmt.Errorf("rate exceeded")
	}
	return nil
}

// benchServer starts the bench service behind opts on a bufconn listener
// (inProcess) or on loopback TCP, and returns a client.
func benchServer(b *testing.B, inProcess bool, delay time.Duration, opts ...grpc.ServerOption) testpb.TestServiceClient {
	var ln net.Listener
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	target := ""
	if inProcess {
		bl := bufconn.Listen(1 << 20)
		ln = bl
		target = "passthrough:///bufconn"
		dialOpts = append(dialOpts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	} else {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			b.Fatal(err)
		}
		target = ln.Addr().String()
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, &benchService{delay: delay})
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

func benchLimits(b *testing.B, redis bool, keys int) *rpclimit.Limiters {
	var st keycap.Store = memstore.New()
	if redis {
		rdb := testenv.Redis(b)
		var err error
		if st, err = redisstore.New(rdb, redisstore.WithPrefix(testenv.Prefix(b, rdb))); err != nil {
			b.Fatal(err)
		}
	}
	limiter, err := keycap.NewLimiter(st)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = limiter.Close() })
	limits, _ := rpclimit.New(limiter)
	_ = limits.Set("/grpc.testing.TestService/*", rpclimit.Max(1000).ByMetadata("x-tenant"))
	return limits
}

// BenchmarkInterceptor: unary calls and server streams through grpc-go,
// without an interceptor, with grpclimit's (a cap per tenant from metadata,
// memstore or Redis), and with go-grpc-middleware's ratelimit interceptor
// over a token bucket (what grpc-go users have), alternated in one run. It
// reports each one's time per call and grpclimit's added time and ratio to
// bare; keys-N spreads the calls over N tenants.
//
//	go test ./grpclimit -run '^$' -bench Interceptor -benchtime 20000x
func BenchmarkInterceptor(b *testing.B) {
	type door struct {
		name string
		opts func(b *testing.B) []grpc.ServerOption
	}
	keycapDoor := func(redis bool, keys int) func(b *testing.B) []grpc.ServerOption {
		return func(b *testing.B) []grpc.ServerOption {
			l := benchLimits(b, redis, keys)
			return []grpc.ServerOption{
				grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(l)),
				grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(l))}
		}
	}
	peer := func(b *testing.B) []grpc.ServerOption {
		a := allow{rate.NewLimiter(rate.Inf, 1)}
		return []grpc.ServerOption{
			grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(a)),
			grpc.ChainStreamInterceptor(ratelimit.StreamServerInterceptor(a))}
	}
	for _, tc := range []struct {
		name      string
		inProcess bool
		redis     bool
		delay     time.Duration
		workers   int
	}{
		{"bufconn/memstore", true, false, 0, 8},
		{"loopback/memstore", false, false, 0, 8},
		{"loopback/redis", false, true, 0, 8},
		{"loopback/redis/5ms", false, true, 5 * time.Millisecond, 16},
	} {
		for _, stream := range []bool{false, true} {
			if stream && tc.delay > 0 {
				continue
			}
			kind := "unary"
			if stream {
				kind = "stream"
			}
			b.Run(tc.name+"/"+kind, func(b *testing.B) {
				doors := []door{
					{"bare", func(*testing.B) []grpc.ServerOption { return nil }},
					{"keycap", keycapDoor(tc.redis, 1)},
					{"ratelimit", peer},
				}
				ops := make([]func(int) error, len(doors))
				for i, d := range doors {
					client := benchServer(b, tc.inProcess, tc.delay, d.opts(b)...)
					ctxs := make([]context.Context, tc.workers)
					for w := range ctxs {
						ctxs[w] = metadata.AppendToOutgoingContext(context.Background(), "x-tenant", fmt.Sprint("t", w))
					}
					ops[i] = func(w int) error {
						if !stream {
							_, err := client.UnaryCall(ctxs[w], &testpb.SimpleRequest{})
							return err
						}
						s, err := client.StreamingOutputCall(ctxs[w], &testpb.StreamingOutputCallRequest{})
						if err != nil {
							return err
						}
						if _, err := s.Recv(); err != nil {
							return err
						}
						if _, err := s.Recv(); err != io.EOF {
							return fmt.Errorf("stream end: %v", err)
						}
						return nil
					}
				}
				times := testkit.Alternate(b, tc.workers, 500, 200, ops...)
				per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
				for i, d := range doors {
					b.ReportMetric(per(times[i])/1e3, d.name+"-µs/call")
				}
				b.ReportMetric((per(times[1])-per(times[0]))/1e3, "keycap-added-µs")
				b.ReportMetric(float64(times[0])/float64(times[1]), "keycap÷bare")
				b.ReportMetric(float64(times[0])/float64(times[2]), "ratelimit÷bare")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
