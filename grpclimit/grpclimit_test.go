package grpclimit_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/rpclimit"
)

const unary = "/grpc.testing.TestService/UnaryCall"

func newLimiters(t testing.TB, opts ...rpclimit.Option) (*keycap.Limiter, *rpclimit.Limiters) {
	t.Helper()
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = limiter.Close() })
	limits, err := rpclimit.New(limiter, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return limiter, limits
}

// retryDelay returns the RetryInfo delay of err's status, or -1.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

// TestUnaryCapPerKey: 20 tenants, 10 concurrent calls each, a cap of 2 per
// tenant: the service never runs more than 2 of a tenant's calls at once,
// and every refused call is RESOURCE_EXHAUSTED with RetryInfo and the
// pushback trailer.
func TestUnaryCapPerKey(t *testing.T) {
	_, limits := newLimiters(t)
	if err := limits.Set("/grpc.testing.TestService/*", rpclimit.Max(2).ByMetadata("x-tenant").RetryAfter(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	svc := &service{g: newGauge(), delay: 20 * time.Millisecond}
	client := testpb.NewTestServiceClient(serve(t, limits, svc))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	var bad []string
	for k := range 20 {
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var trailer metadata.MD
				_, err := client.UnaryCall(tenant(ctx, fmt.Sprint("t", k)), &testpb.SimpleRequest{}, grpc.Trailer(&trailer))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case status.Code(err) == codes.ResourceExhausted && retryDelay(err) == 1500*time.Millisecond &&
					strings.Join(trailer.Get("grpc-retry-pushback-ms"), ",") == "1500":
					refused++
				default:
					bad = append(bad, fmt.Sprintf("%v (delay %v, trailer %v)", err, retryDelay(err), trailer))
				}
			}()
		}
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d unexpected outcomes, first: %s", len(bad), bad[0])
	}
	if over := svc.g.over(2); len(over) > 0 {
		t.Fatalf("over the cap of 2: %v", over)
	}
	if ok < 40 || refused == 0 || ok+refused != 200 {
		t.Fatalf("%d served, %d refused of 200: want at least 2 per tenant served and some refused", ok, refused)
	}
}

// TestStreamHoldsItsSlot: a server stream holds its tenant's slot until the
// client cancels it; the next stream is granted at once after.
func TestStreamHoldsItsSlot(t *testing.T) {
	_, limits := newLimiters(t)
	if err := limits.Set("*", rpclimit.Max(1).ByMetadata("x-tenant")); err != nil {
		t.Fatal(err)
	}
	svc := &service{g: newGauge(), release: make(chan struct{})}
	client := testpb.NewTestServiceClient(serve(t, limits, svc))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	sctx, stop := context.WithCancel(tenant(ctx, "a"))
	first, err := client.StreamingOutputCall(sctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	second, err := client.StreamingOutputCall(tenant(ctx, "a"), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream while the first is open: %v, want RESOURCE_EXHAUSTED", err)
	}
	// Cancel the first stream: its handler sees its context end and
	// returns, and the slot is free for the next stream at once.
	stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		third, err := client.StreamingOutputCall(tenant(ctx, "a"), &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = third.Recv()
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("a stream after the first was cancelled: %v", err)
		}
	}
}

// TestMissingKey: a call without the metadata its limit is keyed by follows
// the limit's rule — INVALID_ARGUMENT naming it, the default key, or no
// limit — and a key over MaxKeyBytes counts as missing; never INTERNAL.
func TestMissingKey(t *testing.T) {
	_, limits := newLimiters(t)
	for pattern, rule := range map[string]rpclimit.Rule{
		unary:                                 rpclimit.Max(0).ByMetadata("X-Tenant"), // refuses whoever has the key
		"/grpc.testing.TestService/EmptyCall": rpclimit.Max(0).ByMetadata("x-tenant").IfMissing(rpclimit.SkipIfMissing),
		"/grpc.testing.TestService/CacheableUnaryCall":  rpclimit.Max(1).ByMetadata("x-tenant").IfMissing(rpclimit.DefaultKeyIfMissing),
		"/grpc.testing.TestService/StreamingOutputCall": rpclimit.Max(1).ByMetadata("x-tenant-bin"),
	} {
		if err := limits.Set(pattern, rule); err != nil {
			t.Fatal(err)
		}
	}
	svc := &service{g: newGauge()}
	client := testpb.NewTestServiceClient(serve(t, limits, svc))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"x-tenant"`) {
		t.Errorf("no x-tenant: %v, want INVALID_ARGUMENT naming it", err)
	}
	long := strings.Repeat("k", rpclimit.MaxKeyBytes+1)
	if _, err := client.UnaryCall(tenant(ctx, long), &testpb.SimpleRequest{}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a key of %d bytes: %v, want INVALID_ARGUMENT", len(long), err)
	}
	if _, err := client.UnaryCall(tenant(ctx, "a"), &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("with x-tenant over a max of 0: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Errorf("no x-tenant, SkipIfMissing: %v, want served", err)
	}
	if _, err := client.EmptyCall(tenant(ctx, "a"), &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("x-tenant with SkipIfMissing's max of 0: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := client.CacheableUnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Errorf("no x-tenant, DefaultKeyIfMissing: %v, want served by the peer's key", err)
	}
	// Binary metadata: any bytes are a key.
	bin := metadata.AppendToOutgoingContext(ctx, "x-tenant-bin", string([]byte{0, 0xff, '\n', 7}))
	st, err := client.StreamingOutputCall(bin, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Errorf("binary key: %v", err)
	}
}

// TestWaitAndDeadline: a call that waits in line past its deadline ends
// DEADLINE_EXCEEDED and holds nothing; a holder whose deadline passes frees
// its slot when its handler returns, and the waiter behind it is served.
func TestWaitAndDeadline(t *testing.T) {
	_, limits := newLimiters(t)
	if err := limits.Set(unary, rpclimit.Limit(keycap.Spec{Max: 1, Wait: 10 * time.Second}).ByMetadata("x-tenant")); err != nil {
		t.Fatal(err)
	}
	svc := &service{g: newGauge(), release: make(chan struct{}), started: make(chan string, 4)}
	client := testpb.NewTestServiceClient(serve(t, limits, svc))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holderCtx, holderStop := context.WithTimeout(tenant(ctx, "a"), 2*time.Second)
	defer holderStop()
	holder := make(chan error, 1)
	go func() {
		_, err := client.UnaryCall(holderCtx, &testpb.SimpleRequest{})
		holder <- err
	}()
	if got := testkit.Recv(t, svc.started, 15*time.Second, "the holder's handler"); got != "a" {
		t.Fatalf("started %q", got)
	}
	short, shortStop := context.WithTimeout(tenant(ctx, "a"), 200*time.Millisecond)
	defer shortStop()
	start := time.Now()
	if _, err := client.UnaryCall(short, &testpb.SimpleRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a waiter past its deadline: %v, want DEADLINE_EXCEEDED", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the waiter took %v to give up at a 200ms deadline", d)
	}
	waiter := make(chan error, 1)
	go func() {
		_, err := client.UnaryCall(tenant(ctx, "a"), &testpb.SimpleRequest{})
		waiter <- err
	}()
	if err := testkit.Recv(t, holder, 15*time.Second, "the holder's end"); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("holder: %v, want DEADLINE_EXCEEDED", err)
	}
	// The holder's deadline freed the slot: the waiter is served next.
	if got := testkit.Recv(t, svc.started, 15*time.Second, "the waiter's handler"); got != "a" {
		t.Fatalf("started %q", got)
	}
	close(svc.release)
	if err := testkit.Recv(t, waiter, 15*time.Second, "the waiter's end"); err != nil {
		t.Fatalf("waiter: %v", err)
	}
}
