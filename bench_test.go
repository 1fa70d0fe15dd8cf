package keycap_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
)

// BenchmarkLimiter measures Limiter.Acquire + Lease.Release on memstore: the
// whole path a front door takes (lease, keep-alive registration, events
// off), with a limit built once, and with the limit built per operation as an
// HTTP middleware does (which hashes the key).
func BenchmarkLimiter(b *testing.B) {
	ctx := context.Background()
	for _, keys := range []int{1, 10000} {
		l, err := keycap.NewLimiter(memstore.New())
		if err != nil {
			b.Fatal(err)
		}
		limits := make([]keycap.Limit, keys)
		for i := range limits {
			limits[i] = keycap.MustLimit("bench", fmt.Sprint(i), 1<<20)
		}
		b.Run(fmt.Sprintf("serial/keys=%d", keys), func(b *testing.B) {
			i := 0
			for b.Loop() {
				ls, err := l.Acquire(ctx, limits[i%keys])
				if err != nil {
					b.Fatal(err)
				}
				ls.Release()
				i++
			}
		})
		b.Run(fmt.Sprintf("parallel/keys=%d", keys), func(b *testing.B) {
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(7919))
				for pb.Next() {
					ls, err := l.Acquire(ctx, limits[i%keys])
					if err != nil {
						b.Fatal(err)
					}
					ls.Release()
					i++
				}
			})
		})
		b.Run(fmt.Sprintf("serial-newlimit/keys=%d", keys), func(b *testing.B) {
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprint("user:", i)
			}
			i := 0
			for b.Loop() {
				lim, err := keycap.NewLimit("bench", names[i%keys], 1<<20)
				if err != nil {
					b.Fatal(err)
				}
				ls, err := l.Acquire(ctx, lim)
				if err != nil {
					b.Fatal(err)
				}
				ls.Release()
				i++
			}
		})
		_ = l.Close()
	}
}

// BenchmarkLimiterShared is BenchmarkLimiter's serial row for a weighted
// limit and for a limit with a parent, on memstore: what weights and
// parents cost beside the plain cap.
func BenchmarkLimiterShared(b *testing.B) {
	ctx := context.Background()
	parent := keycap.MustParent("bench", 1<<20)
	for _, tc := range []struct {
		name string
		opts []keycap.LimitOption
	}{
		{"plain", nil},
		{"weight=2", []keycap.LimitOption{keycap.WithWeight(2)}},
		{"parent", []keycap.LimitOption{keycap.WithParent(parent)}},
	} {
		for _, keys := range []int{1, 10000} {
			l, err := keycap.NewLimiter(memstore.New())
			if err != nil {
				b.Fatal(err)
			}
			limits := make([]keycap.Limit, keys)
			for i := range limits {
				limits[i] = keycap.MustLimit("bench", fmt.Sprint(i), 1<<20, tc.opts...)
			}
			b.Run(fmt.Sprintf("%s/keys=%d", tc.name, keys), func(b *testing.B) {
				i := 0
				for b.Loop() {
					ls, err := l.Acquire(ctx, limits[i%keys])
					if err != nil {
						b.Fatal(err)
					}
					ls.Release()
					i++
				}
			})
			_ = l.Close()
		}
	}
}
