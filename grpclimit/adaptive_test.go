package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/rpclimit"
)

// TestHandlerOverloadCutsAdaptiveTotal: a handler's RESOURCE_EXHAUSTED is
// an overload signal: the adaptive parent its calls share goes down to its
// floor.
func TestHandlerOverloadCutsAdaptiveTotal(t *testing.T) {
	limiter, limits := newLimiters(t)
	p := keycap.MustParent("grpc-adaptive", 10, keycap.WithAdaptive(keycap.Adaptive{Floor: 2, Ceiling: 20, Interval: 10 * time.Millisecond}))
	if err := limits.Set("*", rpclimit.Limit(keycap.Spec{Max: 10, Parent: p})); err != nil {
		t.Fatal(err)
	}
	// every call answered RESOURCE_EXHAUSTED, as by a backend that cannot take more
	svc := &service{g: newGauge(), fail: status.Error(codes.ResourceExhausted, "backend full")}
	client := testpb.NewTestServiceClient(serve(t, limits, svc))
	testkit.WaitUntil(t, 20*time.Second, "the total to reach the floor", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call: %v, want the handler's RESOURCE_EXHAUSTED", err)
		}
		tu, _ := limiter.Tuning(p)
		return tu.Total == 2 && tu.Reason == "overload"
	})
}

// TestStreamHandlerSeesItsLease: a streaming handler's context carries the
// call's lease, as a unary one's does: its fencing token, and what
// ReportOverload reports to.
func TestStreamHandlerSeesItsLease(t *testing.T) {
	_, limits := newLimiters(t)
	if err := limits.Set("*", rpclimit.Limit(keycap.Spec{Max: 5, Fence: true})); err != nil {
		t.Fatal(err)
	}
	svc := &service{g: newGauge(), fences: make(chan []keycap.Fence, 1)}
	client := testpb.NewTestServiceClient(serve(t, limits, svc))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	select {
	case fs := <-svc.fences:
		if len(fs) != 1 || fs[0].Token == 0 {
			t.Fatalf("the stream handler's fences: %+v, want one token", fs)
		}
	case <-ctx.Done():
		t.Fatal("the stream handler never ran")
	}
}
