package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/grpclimit"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/rpclimit"
)

// TestAbandonedStreams: 2,000 streams opened and abandoned at once by their
// clients, and streams whose client never reads while the server floods
// them, then closes its connection: no slot leaks (every tenant's whole cap
// can be taken again) and the server's goroutines come back to where they
// were.
func TestAbandonedStreams(t *testing.T) {
	limiter, limits := newLimiters(t)
	const max, tenants = 2, 20
	if err := limits.Set(streamMethod, rpclimit.Max(max).ByMetadata("x-tenant")); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &flood{entered: make(chan struct{}, 4096)}
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limits)),
		grpc.MaxConcurrentStreams(1000))
	testpb.RegisterTestServiceServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Clients that never read: each tenant's cap taken by floods.
	reader := dial(t, ln.Addr().String())
	client := testpb.NewTestServiceClient(reader)
	for i := range tenants * max {
		if _, err := client.StreamingOutputCall(tenant(ctx, fmt.Sprint("t", i%tenants)), &testpb.StreamingOutputCallRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for range tenants * max {
		testkit.Recv(t, f.entered, 10*time.Second, "a flooding handler")
	}
	// 2,000 more streams, opened and abandoned at once, on 10 connections.
	var wg sync.WaitGroup
	conns := []*grpc.ClientConn{reader}
	for c := range 10 {
		conns = append(conns, dial(t, ln.Addr().String()))
		cc := testpb.NewTestServiceClient(conns[len(conns)-1])
		for i := range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sctx, stop := context.WithCancel(tenant(ctx, fmt.Sprint("t", (c+i)%tenants)))
				s, err := cc.StreamingOutputCall(sctx, &testpb.StreamingOutputCallRequest{})
				if err == nil && i%2 == 0 {
					_, err = s.Recv() // half read once: refused, since the floods hold every slot
					if status.Code(err) != codes.ResourceExhausted {
						t.Errorf("an abandoned stream: %v, want RESOURCE_EXHAUSTED", err)
					}
				}
				stop()
			}()
		}
	}
	wg.Wait()
	// The flooded client goes away without reading.
	_ = reader.Close()
	testkit.WaitUntil(t, 20*time.Second, "every tenant's slots free", func() bool {
		for i := range tenants {
			lim := keycap.Spec{Name: streamMethod, Max: max}.For(fmt.Sprint("md:x-tenant:t", i))
			var leases []*keycap.Lease
			for range max {
				ls, err := limiter.Acquire(ctx, lim)
				if err != nil {
					break
				}
				leases = append(leases, ls)
			}
			for _, ls := range leases {
				ls.Release()
			}
			if len(leases) < max {
				return false
			}
		}
		return true
	})
	for _, cc := range conns {
		_ = cc.Close()
	}
	testkit.WaitUntil(t, 20*time.Second, "the server's goroutines back", func() bool {
		return runtime.NumGoroutine() <= base+5
	})
}
