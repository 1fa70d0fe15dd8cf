package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// BenchmarkPairsVsPing measures acquire+release pairs per second on one
// Redis and on the cluster, at 1, 8 and 64 goroutines, beside the same
// client's PING rate at the same concurrency, in alternating rounds of one
// benchmark. pairs/ping is the ratio of the two rates for the store's own
// calls (each waits for its reply: two round trips unbatched, so 0.5 was the
// ceiling), limiter-pairs/ping for Limiter.Acquire and Lease.Release (whose
// release does not wait). Each goroutine has a pool of its own, with room:
// the rows measure the operations, not contention.
func BenchmarkPairsVsPing(b *testing.B) {
	for _, store := range backends {
		for _, g := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", store.name, g), func(b *testing.B) {
				c := store.client(b)
				s := newStore(b, c, testenv.Prefix(b, c))
				pair, limiterPair := pairs(s, benchLimiter(b, s), g, "pairs")
				ping := func(int) error { return c.Ping(context.Background()).Err() }
				// 200 of each first warm the connection pool.
				t := testkit.Alternate(b, g, max(g*50, 500), 200, ping, pair, limiterPair)
				b.ReportMetric(float64(t[0])/float64(t[1]), "pairs/ping")
				b.ReportMetric(float64(t[0])/float64(t[2]), "limiter-pairs/ping")
				b.ReportMetric(float64(b.N)/t[1].Seconds(), "pairs/s")
				b.ReportMetric(float64(b.N)/t[0].Seconds(), "pings/s")
			})
		}
	}
}

// BenchmarkPairLatency measures one goroutine's acquire+release pairs on one
// Redis, one at a time, and reports the median and 99th percentile of a
// pair's time: batching must not make a lone caller slower. store- is the
// store's own calls, limiter- Limiter.Acquire and Lease.Release (in the
// Limiter, whose release does not wait, a pair is about one round trip).
func BenchmarkPairLatency(b *testing.B) {
	c := testenv.Redis(b)
	s := newStore(b, c, testenv.Prefix(b, c))
	l := benchLimiter(b, s)
	ctx := context.Background()
	pool := store.PoolOf(0, "latency", "k")
	lim := keycap.Spec{Name: "latency-limiter", Max: 1}.For("k")
	storeTimes := make([]time.Duration, 0, 1<<14)
	limiterTimes := make([]time.Duration, 0, 1<<14)
	for b.Loop() {
		start := time.Now()
		o := store.NewOwner()
		if g, err := s.Acquire(ctx, pool, o, store.Demand{Max: 1, TTL: time.Minute}); err != nil || !g.Granted {
			b.Fatalf("acquire: %v %v", g.Granted, err)
		}
		if _, err := s.Release(ctx, pool, o, store.Demand{}, false); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		ls, err := l.Acquire(ctx, lim)
		if err != nil {
			b.Fatal(err)
		}
		ls.Release()
		end := time.Now()
		storeTimes = append(storeTimes, mid.Sub(start))
		limiterTimes = append(limiterTimes, end.Sub(mid))
	}
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"store", storeTimes}, {"limiter", limiterTimes}} {
		slices.Sort(m.d)
		b.ReportMetric(float64(m.d[len(m.d)/2].Microseconds()), m.name+"-p50-µs")
		b.ReportMetric(float64(m.d[len(m.d)*99/100].Microseconds()), m.name+"-p99-µs")
	}
}

// BenchmarkRedisCPUPerPair measures the CPU one Redis spends (INFO cpu, its
// whole process: parsing, scripts and replies) per acquire+release pair at 64
// goroutines, for the store's own calls and through the Limiter, whose
// release rides in a later pipeline (the last few of a round's releases
// are counted in the next round's), and the time Redis spends in an acquire
// script (INFO commandstats). Redis time is what caps pairs/s when
// Redis shares the machine's cores with its clients.
func BenchmarkRedisCPUPerPair(b *testing.B) {
	const g = 64
	c := testenv.Redis(b)
	s := newStore(b, c, testenv.Prefix(b, c))
	pair, limiterPair := pairs(s, benchLimiter(b, s), g, "cpu")
	ops := []struct {
		name string
		pair func(w int) error
	}{{"store", pair}, {"limiter", limiterPair}}
	for _, op := range ops {
		testkit.Rounds(b, g, 500, op.pair)
	}
	cpu := make([]float64, len(ops))
	usec0, calls0 := scriptUsec(b, c)
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, 5000)
		for i, op := range ops {
			before := serverCPU(b, c)
			testkit.Rounds(b, g, n, op.pair)
			cpu[i] += serverCPU(b, c) - before
		}
		done += n
	}
	b.StopTimer()
	for i, op := range ops {
		b.ReportMetric(1000*cpu[i]/float64(b.N), op.name+"-redis-cpu-µs/pair")
	}
	usec, calls := scriptUsec(b, c)
	b.ReportMetric((usec-usec0)/(calls-calls0), "script-µs/acquire")
}

// pairs gives each of g goroutines a pool of its own, of max 1, and returns
// one goroutine's acquire+release pair as the store's own calls and through
// the Limiter l.
func pairs(s *redisstore.Store, l *keycap.Limiter, g int, name string) (direct, limiter func(w int) error) {
	ctx := context.Background()
	pools := make([]store.PoolID, g)
	limits := make([]keycap.Limit, g)
	for i := range pools {
		pools[i] = store.PoolOf(0, name, fmt.Sprint(i))
		limits[i] = keycap.Spec{Name: name + "-limiter", Max: 1}.For(fmt.Sprint(i))
	}
	direct = func(w int) error {
		o := store.NewOwner()
		g, err := s.Acquire(ctx, pools[w], o, store.Demand{Max: 1, TTL: time.Minute})
		if err != nil || !g.Granted {
			return fmt.Errorf("acquire: %v %v", g.Granted, err)
		}
		_, err = s.Release(ctx, pools[w], o, store.Demand{}, false)
		return err
	}
	limiter = func(w int) error {
		ls, err := l.Acquire(ctx, limits[w])
		if err != nil {
			return err
		}
		ls.Release()
		return nil
	}
	return direct, limiter
}
