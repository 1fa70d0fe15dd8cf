package connectlimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/connectlimit"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/rpclimit"
)

const (
	sayProc   = "/test.v1.EchoService/Say"
	watchProc = "/test.v1.EchoService/Watch"
)

// echo is a service without generated code: its messages are protobuf's
// well-known wrappers. Say holds until release is closed when its request
// is "hold"; Watch sends one message and holds until the client goes.
type echo struct {
	release chan struct{}
	entered chan string
}

func (e *echo) say(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	if req.Msg.GetValue() == "hold" {
		e.entered <- req.Header().Get("X-Tenant")
		select {
		case <-e.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return connect.NewResponse(wrapperspb.String(req.Msg.GetValue())), nil
}

func (e *echo) watch(ctx context.Context, _ *connect.Request[wrapperspb.StringValue], s *connect.ServerStream[wrapperspb.StringValue]) error {
	if err := s.Send(wrapperspb.String("open")); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// serve starts the service with limits' interceptor over HTTP/1.1 and
// HTTP/2 without TLS (for the gRPC protocol), and returns its URL.
func serve(t *testing.T, limits *rpclimit.Limiters, e *echo) string {
	t.Helper()
	opt := connect.WithInterceptors(connectlimit.NewInterceptor(limits))
	mux := http.NewServeMux()
	mux.Handle(sayProc, connect.NewUnaryHandler(sayProc, e.say, opt))
	mux.Handle(watchProc, connect.NewServerStreamHandler(watchProc, e.watch, opt))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: p, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		select {
		case <-e.release:
		default:
			close(e.release)
		}
		_ = srv.Close()
	})
	return "http://" + ln.Addr().String()
}

func httpClient(t *testing.T) *http.Client {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

var protocols = map[string][]connect.ClientOption{
	"connect":  nil,
	"grpc":     {connect.WithGRPC()},
	"grpc-web": {connect.WithGRPCWeb()},
}

func newLimits(t *testing.T) (*keycap.Limiter, *rpclimit.Limiters) {
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = limiter.Close() })
	limits, err := rpclimit.New(limiter)
	if err != nil {
		t.Fatal(err)
	}
	return limiter, limits
}

func retryDelay(err error) time.Duration {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return -1
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ri, ok := v.(*errdetails.RetryInfo); ok {
				return ri.GetRetryDelay().AsDuration()
			}
		}
	}
	return -1
}

// TestCapOverEveryProtocol: over the Connect, gRPC and gRPC-Web protocols, a
// tenant's calls beyond its cap are refused with CodeResourceExhausted, a
// RetryInfo of the limit's delay and the pushback metadata; a stream holds
// its slot until the client goes; a call without the key's metadata is
// CodeInvalidArgument.
func TestCapOverEveryProtocol(t *testing.T) {
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			_, limits := newLimits(t)
			_ = limits.Set("/test.v1.EchoService/*", rpclimit.Max(1).ByMetadata("x-tenant").RetryAfter(1200*time.Millisecond))
			e := &echo{release: make(chan struct{}), entered: make(chan string, 2)}
			url := serve(t, limits, e)
			hc := httpClient(t)
			say := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, url+sayProc, opts...)
			watch := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, url+watchProc, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req := func(v, tenant string) *connect.Request[wrapperspb.StringValue] {
				r := connect.NewRequest(wrapperspb.String(v))
				if tenant != "" {
					r.Header().Set("X-Tenant", tenant)
				}
				return r
			}

			held := make(chan error, 1)
			go func() {
				_, err := say.CallUnary(ctx, req("hold", "a"))
				held <- err
			}()
			testkit.Recv(t, e.entered, 10*time.Second, "the held call")
			_, err := say.CallUnary(ctx, req("x", "a"))
			var ce *connect.Error
			if connect.CodeOf(err) != connect.CodeResourceExhausted || retryDelay(err) != 1200*time.Millisecond ||
				!errors.As(err, &ce) || ce.Meta().Get("Grpc-Retry-Pushback-Ms") != "1200" {
				t.Fatalf("over the cap: %v (delay %v), want resource_exhausted with a 1.2 s RetryInfo and pushback", err, retryDelay(err))
			}
			if _, err := say.CallUnary(ctx, req("x", "b")); err != nil {
				t.Fatalf("another tenant: %v", err)
			}
			if _, err := say.CallUnary(ctx, req("x", "")); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("no x-tenant: %v, want invalid_argument", err)
			}
			close(e.release)
			if err := testkit.Recv(t, held, 10*time.Second, "the held call's end"); err != nil {
				t.Fatal(err)
			}

			// A stream holds b's slot until it is cancelled.
			sctx, stop := context.WithCancel(ctx)
			defer stop()
			st, err := watch.CallServerStream(sctx, req("", "b"))
			if err != nil || !st.Receive() {
				t.Fatalf("stream: %v %v", err, st.Err())
			}
			if _, err := say.CallUnary(ctx, req("x", "b")); connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("while b's stream is open: %v, want resource_exhausted", err)
			}
			stop()
			testkit.WaitUntil(t, 5*time.Second, "b's slot after its stream", func() bool {
				_, err := say.CallUnary(ctx, req("x", "b"))
				return err == nil
			})
		})
	}
}

// TestPauseInterceptor: a refusal with a delay seen by a client pauses the
// service for every client of the same Pauses: the next call fails at once,
// unsent, with CodeResourceExhausted and a *pause.PausedError.
func TestPauseInterceptor(t *testing.T) {
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			limiter, limits := newLimits(t)
			var reached atomic.Int64
			_ = limits.For(sayProc, func(context.Context, *rpclimit.Call) rpclimit.Rule {
				if reached.Add(1) == 1 {
					return rpclimit.Max(0).RetryAfter(time.Minute)
				}
				return nil
			})
			url := serve(t, limits, &echo{release: make(chan struct{})})
			ps, err := pause.New(limiter)
			if err != nil {
				t.Fatal(err)
			}
			opts := append([]connect.ClientOption{connect.WithInterceptors(connectlimit.NewPauseInterceptor(ps))}, opts...)
			say := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](httpClient(t), url+sayProc, opts...)
			watch := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](httpClient(t), url+watchProc, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := say.CallUnary(ctx, connect.NewRequest(wrapperspb.String("x"))); connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("first call: %v", err)
			}
			_, err = say.CallUnary(ctx, connect.NewRequest(wrapperspb.String("x")))
			var pe *pause.PausedError
			if connect.CodeOf(err) != connect.CodeResourceExhausted || !errors.As(err, &pe) || pe.API != "test.v1.EchoService" {
				t.Fatalf("during the pause: %v, want a *pause.PausedError", err)
			}
			if d := retryDelay(err); d < 50*time.Second || d > time.Minute {
				t.Errorf("the paused call's RetryInfo: %v, want about a minute", d)
			}
			st, err := watch.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("x")))
			if err == nil && st.Receive() {
				t.Fatal("a stream during the pause was opened")
			}
			if err == nil {
				err = st.Err()
			}
			if !errors.Is(err, pause.ErrPaused) {
				t.Errorf("a stream during the pause: %v, want pause.ErrPaused", err)
			}
			if n := reached.Load(); n != 1 {
				t.Fatalf("%d calls reached the server, want 1", n)
			}
		})
	}
}

// TestBinaryMetadataDecoded: a -bin key reaches the rule as its bytes, as
// grpc-go gives them, whichever protocol carries it: the same tenant
// counts in the same pool through either door.
func TestBinaryMetadataDecoded(t *testing.T) {
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			_, limits := newLimits(t)
			raw := string([]byte{0, 0xff, 'k', '\n'})
			got := make(chan string, 1)
			_ = limits.For(sayProc, func(_ context.Context, c *rpclimit.Call) rpclimit.Rule {
				got <- c.Get("x-tenant-bin")
				return nil
			})
			url := serve(t, limits, &echo{release: make(chan struct{})})
			say := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](httpClient(t), url+sayProc, opts...)
			req := connect.NewRequest(wrapperspb.String("x"))
			req.Header().Set("X-Tenant-Bin", connect.EncodeBinaryHeader([]byte(raw)))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := say.CallUnary(ctx, req); err != nil {
				t.Fatal(err)
			}
			if k := testkit.Recv(t, got, 5*time.Second, "the rule's call"); k != raw {
				t.Fatalf("the rule read %q, want the decoded %q", k, raw)
			}
		})
	}
}
