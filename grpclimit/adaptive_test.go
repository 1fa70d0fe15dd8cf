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
