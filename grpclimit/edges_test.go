package grpclimit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/grpclimit"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/rpclimit"
)

// TestDefaultKey: without a key of its own a limit counts the identity
// WithIdentify finds, else the peer's address, and a proxy's
// x-forwarded-for only when the peer is a trusted proxy.
func TestDefaultKey(t *testing.T) {
	trusted, err := httplimit.NewClientIP(httplimit.HeaderXForwardedFor, 64, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	var seen sync.Map // keys the limit counted
	identify := func(ctx context.Context) (rpclimit.Identity, bool) {
		md, _ := metadata.FromIncomingContext(ctx)
		if u := md.Get("x-user"); len(u) > 0 {
			return rpclimit.Identity{Kind: "user", ID: u[0]}, true
		}
		return rpclimit.Identity{}, false
	}
	for _, tc := range []struct {
		name  string
		opts  []rpclimit.Option
		md    []string
		wantK string
	}{
		{"peer", nil, nil, "ip:127.0.0.1"},
		{"untrusted proxy header ignored", nil, []string{"x-forwarded-for", "203.0.113.9"}, "ip:127.0.0.1"},
		{"trusted proxy", []rpclimit.Option{rpclimit.WithClientIP(trusted)}, []string{"x-forwarded-for", "203.0.113.9"}, "ip:203.0.113.9"},
		{"identity first", []rpclimit.Option{rpclimit.WithIdentify(identify), rpclimit.WithClientIP(trusted)}, []string{"x-user", "42", "x-forwarded-for", "203.0.113.9"}, "user:42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, limits := newLimiters(t, tc.opts...)
			if err := limits.For("*", func(ctx context.Context, c *rpclimit.Call) rpclimit.Rule {
				seen.Store(tc.name, limits.DefaultKey(ctx, c))
				return rpclimit.Max(1)
			}); err != nil {
				t.Fatal(err)
			}
			client := testpb.NewTestServiceClient(serve(t, limits, &service{g: newGauge()}))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := client.EmptyCall(metadata.AppendToOutgoingContext(ctx, tc.md...), &testpb.Empty{}); err != nil {
				t.Fatal(err)
			}
			if k, _ := seen.Load(tc.name); k != tc.wantK {
				t.Fatalf("key %v, want %s", k, tc.wantK)
			}
		})
	}
}

// TestStoreDown: with the store unreachable, a limit that fails open runs
// the call and one that fails closed refuses it UNAVAILABLE, with the
// pushback — never INTERNAL.
func TestStoreDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	st, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(st, keycap.WithDecisionBudget(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = limiter.Close() })
	limits, _ := rpclimit.New(limiter)
	_ = limits.Set("/grpc.testing.TestService/EmptyCall", rpclimit.Limit(keycap.Spec{Max: 1, FailMode: keycap.FailOpen}))
	_ = limits.Set(unary, rpclimit.Limit(keycap.Spec{Max: 1, FailMode: keycap.FailClosed}).RetryAfter(3*time.Second))
	client := testpb.NewTestServiceClient(serve(t, limits, &service{g: newGauge()}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Errorf("fail open: %v, want served", err)
	}
	var trailer metadata.MD
	_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable || retryDelay(err) != 3*time.Second || trailer.Get("grpc-retry-pushback-ms")[0] != "3000" {
		t.Errorf("fail closed: %v (delay %v, trailer %v), want UNAVAILABLE with a 3 s pushback", err, retryDelay(err), trailer)
	}
}

// TestRetryPolicyObeysPushback: a grpc-go client whose retry policy retries
// RESOURCE_EXHAUSTED makes its next attempt no sooner than the refusal's
// pushback.
func TestRetryPolicyObeysPushback(t *testing.T) {
	_, limits := newLimiters(t)
	if err := limits.Set(unary, rpclimit.Max(1).ByMetadata("x-tenant").RetryAfter(400*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var attempts []time.Time
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if tenantOf(ctx) == "retrying" {
			mu.Lock()
			attempts = append(attempts, time.Now())
			mu.Unlock()
		}
		return handler(ctx, req)
	}
	svc := &service{g: newGauge(), release: make(chan struct{}), started: make(chan string, 1)}
	// The counting interceptor runs before grpclimit's: it sees every
	// attempt, refused or not.
	cc := serve(t, limits, svc, grpc.ChainUnaryInterceptor(count))
	client := testpb.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { _, _ = client.UnaryCall(tenant(ctx, "retrying"), &testpb.SimpleRequest{}) }() // holds the slot
	testkit.Recv(t, svc.started, 15*time.Second, "the holding call")
	mu.Lock()
	attempts = nil
	mu.Unlock()

	retrying := testpb.NewTestServiceClient(dial(t, cc.Target(), grpc.WithDefaultServiceConfig(`{"methodConfig": [{
		"name": [{"service": "grpc.testing.TestService"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`)))
	_, err := retrying.UnaryCall(tenant(ctx, "retrying"), &testpb.SimpleRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("while the slot is held: %v, want RESOURCE_EXHAUSTED after the retries", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 3 {
		t.Fatalf("%d attempts reached the server, want 3", len(attempts))
	}
	for i := 1; i < len(attempts); i++ {
		if gap := attempts[i].Sub(attempts[i-1]); gap < 400*time.Millisecond {
			t.Errorf("attempt %d came %v after the one before: the 400 ms pushback was not obeyed", i+1, gap)
		}
	}
}

// TestClientPauseAcrossServers: two clients on two Limiters sharing one
// Redis (two servers of a fleet). A RESOURCE_EXHAUSTED with RetryInfo seen
// by one pauses the service for both: the other's next call fails fast,
// unsent, with RESOURCE_EXHAUSTED and a *pause.PausedError; after the pause,
// calls go again.
func TestClientPauseAcrossServers(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t, rdb)
	_, limits := newLimiters(t)
	var allow atomic.Bool
	_ = limits.For(unary, func(context.Context, *rpclimit.Call) rpclimit.Rule {
		if allow.Load() {
			return nil
		}
		return rpclimit.Max(0).RetryAfter(700 * time.Millisecond) // a vendor saying "not now, 700 ms"
	})
	var reached atomic.Int64
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		reached.Add(1)
		return handler(ctx, req)
	}
	target := serve(t, limits, &service{g: newGauge()}, grpc.ChainUnaryInterceptor(count)).Target()

	clients := make([]testpb.TestServiceClient, 2)
	for i := range clients {
		st, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		l, err := keycap.NewLimiter(st)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ps, err := pause.New(l)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = testpb.NewTestServiceClient(dial(t, target,
			grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(ps)),
			grpc.WithChainStreamInterceptor(grpclimit.StreamClientInterceptor(ps))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if _, err := clients[0].UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("first call: %v, want the server's RESOURCE_EXHAUSTED", err)
	}
	allow.Store(true)
	paused := time.Now()
	before := reached.Load()
	_, err := clients[1].UnaryCall(ctx, &testpb.SimpleRequest{})
	var pe *pause.PausedError
	if status.Code(err) != codes.ResourceExhausted || !errors.As(err, &pe) || pe.API != "grpc.testing.TestService" {
		t.Fatalf("the other server's call during the pause: %v, want RESOURCE_EXHAUSTED with a *pause.PausedError", err)
	}
	if d := retryDelay(err); d <= 0 || d > 700*time.Millisecond {
		t.Errorf("the paused call's RetryInfo: %v, want the time left of 700 ms", d)
	}
	// A stream to the paused service is not opened either.
	if _, err := clients[1].StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}); !errors.Is(err, pause.ErrPaused) {
		t.Errorf("a stream during the pause: %v, want pause.ErrPaused", err)
	}
	if n := reached.Load() - before; n != 0 {
		t.Fatalf("%d calls reached the server during the pause", n)
	}
	// After the pause the calls go.
	testkit.WaitUntil(t, 5*time.Second, "a call after the pause", func() bool {
		_, err := clients[1].UnaryCall(ctx, &testpb.SimpleRequest{})
		if err != nil && !errors.Is(err, pause.ErrPaused) {
			t.Fatalf("after the pause: %v", err)
		}
		return err == nil
	})
	if d := time.Since(paused); d < 600*time.Millisecond {
		t.Errorf("calls went again after %v, before the 700 ms pause ended", d)
	}
}

// TestClientInterceptorSharedCallOptions: calls that share a connection's
// default call options (grpc-go passes the connection's own slice when a
// call adds none) each read their own trailer: run under -race.
func TestClientInterceptorSharedCallOptions(t *testing.T) {
	limiter, limits := newLimiters(t)
	_ = limits.Set(unary, rpclimit.Max(0).RetryAfter(time.Millisecond))
	target := serve(t, limits, &service{g: newGauge()}).Target()
	ps, err := pause.New(limiter)
	if err != nil {
		t.Fatal(err)
	}
	cc := dial(t, target, grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(ps, grpclimit.WithMaxWaitInPlace(time.Second))),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<20)),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<20)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			var out testpb.SimpleResponse
			err := cc.Invoke(ctx, unary, &testpb.SimpleRequest{}, &out)
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("call: %v, want RESOURCE_EXHAUSTED", err)
			}
		})
	}
	wg.Wait()
}
