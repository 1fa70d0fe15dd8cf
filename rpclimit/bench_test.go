package rpclimit_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/rpclimit"
)

// BenchmarkRun: the cost of deciding a call's limit and holding its slot on
// memstore, what every RPC door adds to a call in-process: against Do alone
// with the same limit, and for a call no pattern matches.
func BenchmarkRun(b *testing.B) {
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		b.Fatal(err)
	}
	defer limiter.Close()
	limits, _ := rpclimit.New(limiter)
	_ = limits.Set("/pkg.Service/*", rpclimit.Max(1000).ByMetadata("x-tenant"))
	md := map[string][]string{"x-tenant": {"tenant-1"}}
	call := &rpclimit.Call{Procedure: "/pkg.Service/Method", Peer: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}, Metadata: func(name string) []string { return md[name] }}
	ctx := context.Background()
	nothing := func(context.Context) {}
	b.Run("keyed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := limits.Run(ctx, call, nothing); r != nil {
				b.Fatal(r)
			}
		}
	})
	// The same, the calls spread over n tenants: the cost per call stays
	// flat from 10 to 100,000 keys.
	for _, n := range []int{10, 100, 1000, 10000, 100000} {
		b.Run(fmt.Sprintf("keys-%d", n), func(b *testing.B) {
			keys := make([][]string, n)
			for i := range keys {
				keys[i] = []string{fmt.Sprint("tenant-", i)}
			}
			i := 0
			c := &rpclimit.Call{Procedure: "/pkg.Service/Method", Metadata: func(string) []string { return keys[i%n] }}
			b.ReportAllocs()
			for b.Loop() {
				i++
				if r := limits.Run(ctx, c, nothing); r != nil {
					b.Fatal(r)
				}
			}
		})
	}
	b.Run("unmatched", func(b *testing.B) {
		other := &rpclimit.Call{Procedure: "/other.Service/Method"}
		b.ReportAllocs()
		for b.Loop() {
			limits.Run(ctx, other, nothing)
		}
	})
	b.Run("do-alone", func(b *testing.B) {
		lim := keycap.Spec{Name: "/pkg.Service/*", Max: 1000}.For("md:x-tenant:tenant-1")
		fn := func(context.Context) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			if err := limiter.Do(ctx, fn, lim); err != nil {
				b.Fatal(err)
			}
		}
	})
}
