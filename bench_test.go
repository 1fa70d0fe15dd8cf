package keycap_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
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
			limits[i] = keycap.Spec{Name: "bench", Max: 1 << 20}.For(fmt.Sprint(i))
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
				lim := keycap.Spec{Name: "bench", Max: 1 << 20}.For(names[i%keys])
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
// limit, a limit with a parent and one with an adaptive parent, on
// memstore: what weights, parents and adaptive totals cost beside the
// plain cap, from 1 to 10,000 keys.
func BenchmarkLimiterShared(b *testing.B) {
	ctx := context.Background()
	parent := keycap.MustParent("bench", 1<<20)
	adaptive := keycap.MustParent("bench-adaptive", 1<<20, keycap.WithAdaptive(keycap.Adaptive{Floor: 1, Ceiling: 1 << 20}))
	for _, tc := range []struct {
		name string
		spec keycap.Spec
	}{
		{"plain", keycap.Spec{Name: "bench", Max: 1 << 20}},
		{"weight=2", keycap.Spec{Name: "bench", Max: 1 << 20, Weight: 2}},
		{"parent", keycap.Spec{Name: "bench", Max: 1 << 20, Parent: parent}},
		{"adaptive-parent", keycap.Spec{Name: "bench", Max: 1 << 20, Parent: adaptive}},
	} {
		for _, keys := range []int{1, 10, 100, 1000, 10000} {
			l, err := keycap.NewLimiter(memstore.New())
			if err != nil {
				b.Fatal(err)
			}
			limits := make([]keycap.Limit, keys)
			for i := range limits {
				limits[i] = tc.spec.For(fmt.Sprint(i))
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

// BenchmarkAdaptiveParents is an adaptive parent's Acquire + Release on
// memstore with 1 to 1,000 adaptive parents in use by one Limiter, each
// with its tuner reporting every 250 ms, beside as many fixed parents: what
// a decision costs as the totals multiply, and (steps/s) the agreement's
// background work.
func BenchmarkAdaptiveParents(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		kind string
		opts []keycap.ParentOption
	}{
		{"fixed", nil},
		{"adaptive", []keycap.ParentOption{keycap.WithAdaptive(keycap.Adaptive{Floor: 1, Ceiling: 1 << 20, Interval: 250 * time.Millisecond})}},
	} {
		for _, n := range []int{1, 10, 100, 1000} {
			benchParents(ctx, b, tc.kind, n, tc.opts)
		}
	}
}

// benchParents is BenchmarkAdaptiveParents' row for n parents of a kind.
func benchParents(ctx context.Context, b *testing.B, kind string, n int, opts []keycap.ParentOption) {
	l, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		b.Fatal(err)
	}
	parents := make([]*keycap.Parent, n)
	limits := make([]keycap.Limit, n)
	for i := range parents {
		parents[i] = keycap.MustParent(fmt.Sprint("bench-", kind, "-", i), 1<<20, opts...)
		limits[i] = keycap.Spec{Name: fmt.Sprint("bench-", i), Max: 1 << 20, Parent: parents[i]}.For("k")
		ls, err := l.Acquire(ctx, limits[i]) // starts an adaptive one's tuner
		if err != nil {
			b.Fatal(err)
		}
		ls.Release()
	}
	b.Run(fmt.Sprintf("%s/parents=%d", kind, n), func(b *testing.B) {
		var before int64
		for _, p := range parents {
			before += l.TunerSteps(p)
		}
		start := time.Now()
		i := 0
		for b.Loop() {
			ls, err := l.Acquire(ctx, limits[i%n])
			if err != nil {
				b.Fatal(err)
			}
			ls.Release()
			i++
		}
		var after int64
		for _, p := range parents {
			after += l.TunerSteps(p)
		}
		b.ReportMetric(float64(after-before)/time.Since(start).Seconds(), "steps/s")
	})
	_ = l.Close()
}

// BenchmarkSeeAndSteer measures what inspection, overrides and a shadow
// limit cost on the acquire+release path, on memstore, in alternating rounds
// of one run: plain; WithInspection; WithOverrides with none set and with
// 1,000 set for other keys; a shadow limit beside the limit (two store calls
// then, as two enforced limits are, so its row is against two limits).
// Each sub-benchmark reports its ratio to the plain path.
func BenchmarkSeeAndSteer(b *testing.B) {
	ctx := context.Background()
	newLimiter := func(opts ...keycap.Option) *keycap.Limiter {
		l, err := keycap.NewLimiter(memstore.New(), opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	plain := newLimiter()
	inspecting := newLimiter(keycap.WithInspection(keycap.InspectOptions{ShowKeys: true}))
	noOverrides := newLimiter(keycap.WithOverrides(time.Hour))
	overridden := newLimiter(keycap.WithOverrides(time.Hour))
	for i := range 1000 {
		if err := overridden.SetOverride(ctx, keycap.Override{Name: "bench", Key: fmt.Sprint("other:", i), Max: 5}); err != nil {
			b.Fatal(err)
		}
	}
	lim := keycap.Spec{Name: "bench", Max: 1 << 20}.For("k")
	second := keycap.Spec{Name: "bench", Max: 1 << 20}.For("k2")
	shadow := keycap.Spec{Name: "bench", Max: 1 << 20, Shadow: true}.For("k")
	op := func(l *keycap.Limiter, limits ...keycap.Limit) func(int) error {
		return func(int) error {
			ls, err := l.Acquire(ctx, limits...)
			if err != nil {
				return err
			}
			ls.Release()
			return nil
		}
	}
	b.Run("one-limit", func(b *testing.B) {
		t := testkit.Alternate(b, 1, 2000, 1000, op(plain, lim), op(inspecting, lim), op(noOverrides, lim), op(overridden, lim))
		b.ReportMetric(float64(t[0].Nanoseconds())/float64(b.N), "plain-ns/op")
		b.ReportMetric(float64(t[1])/float64(t[0]), "inspection/plain")
		b.ReportMetric(float64(t[2])/float64(t[0]), "overrides-none/plain")
		b.ReportMetric(float64(t[3])/float64(t[0]), "overrides-1000/plain")
	})
	b.Run("two-limits", func(b *testing.B) {
		t := testkit.Alternate(b, 1, 2000, 1000, op(plain, lim, second), op(plain, lim, shadow))
		b.ReportMetric(float64(t[0].Nanoseconds())/float64(b.N), "two-enforced-ns/op")
		b.ReportMetric(float64(t[1])/float64(t[0]), "with-shadow/two-enforced")
	})
}
