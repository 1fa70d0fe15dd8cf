package grpclimit_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/keycap/keycap/grpclimit"
)

// BenchmarkUnaryInterceptorAlone: the interceptor called as grpc-go calls
// it, without the transport: what it adds to each call, in CPU.
func BenchmarkUnaryInterceptorAlone(b *testing.B) {
	limits := benchLimits(b, false, 1)
	icpt := grpclimit.UnaryServerInterceptor(limits)
	ctx := peer.NewContext(metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "t1")),
		&peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}})
	info := &grpc.UnaryServerInfo{FullMethod: unary}
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := icpt(ctx, nil, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}
