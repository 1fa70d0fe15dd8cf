package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/store"
)

// scanCounter counts the SCAN commands a client sends, and its other
// round trips (commands and pipelines; handshakes, and the CLUSTER SLOTS
// go-redis sends by itself, left out).
type scanCounter struct{ n, others atomic.Int64 }

func (c *scanCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *scanCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "scan":
			c.n.Add(1)
		case "hello", "client", "auth", "select", "cluster":
		default:
			c.others.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *scanCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() != "hello" && cmds[0].Name() != "client" {
			c.others.Add(1)
		}
		return next(ctx, cmds)
	}
}

// countScans installs a scanCounter on c, on every node of a cluster
// (once each, new nodes included).
func countScans(c redis.UniversalClient) *scanCounter {
	sc := &scanCounter{}
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		c.AddHook(sc)
		return sc
	}
	var mu sync.Mutex
	hooked := map[*redis.Client]bool{}
	hook := func(n *redis.Client) {
		mu.Lock()
		defer mu.Unlock()
		if !hooked[n] {
			hooked[n] = true
			n.AddHook(sc)
		}
	}
	cc.OnNewNode(hook)
	_ = cc.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
		hook(n)
		return nil
	})
	return sc
}

// BenchmarkInspect: on the Redis at KEYCAP_REDIS_ADDR, 100,000 pools of
// one name (a lease each) and 100 pools of another (3 leases each), whose
// pools a store pages through with pages of 100.
//
// Per op, a whole paging of the 100 pools: its time (ns/op), its SCANs,
// round trips and pages. Then, after the loop, the p50 and p99 latency of
// an acquire and its release from 8 goroutines for 3 s each: alone, with
// an inspector paging once a second beside them (a dashboard), and with
// one paging in a loop (and how many pagings it made a second).
func BenchmarkInspect(b *testing.B) {
	const others, inspected, leases, size = 100_000, 100, 3, 100
	c := testenv.Redis(b)
	prefix := testenv.Prefix(b, c)
	s := newStore(b, c, prefix)
	ctx := context.Background()

	// The other name's pools, written as the acquire script writes them:
	// a sorted set of owner → expiry by Redis's clock, which expires with
	// its lease. Deleted by this benchmark, 1,000 a round trip, before
	// testenv's cleanup walks the prefix.
	now, err := c.Time(ctx).Result()
	if err != nil {
		b.Fatal(err)
	}
	expiry := float64(now.Add(10 * time.Minute).UnixMilli())
	keys := make([]string, others)
	for i := range keys {
		keys[i] = s.Key(store.PoolOf(0, "bench-inspect-other", fmt.Sprint(i)))
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for batch := range slices.Chunk(keys, 1000) {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				b.Logf("cleanup: %v", err)
				return
			}
		}
	})
	for batch := range slices.Chunk(keys, 1000) {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				o := store.NewOwner()
				p.ZAdd(ctx, k, redis.Z{Score: expiry, Member: o[:]})
				p.PExpire(ctx, k, 10*time.Minute)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	name := "bench-inspect"
	tag := store.TagOf(byte(keycap.FamilyApp), name)
	for i := range inspected {
		p := store.PoolOf(0, name, fmt.Sprint(i))
		for range leases {
			if g, err := s.Acquire(ctx, p, store.NewOwner(), store.Demand{Max: leases, TTL: 10 * time.Minute}); !g.Granted || err != nil {
				b.Fatal(g.Granted, err)
			}
		}
	}
	defer func() {
		for i := range inspected {
			_ = c.Del(ctx, s.Key(store.PoolOf(0, name, fmt.Sprint(i)))).Err()
		}
	}()

	// paging reads every page of the name, and returns the pools and pages.
	paging := func() (pools, pages int, err error) {
		q := store.PageQuery{Tag: tag, Limit: size}
		for {
			page, err := s.InspectPools(ctx, q)
			if err != nil {
				return 0, 0, err
			}
			pools, pages = pools+len(page.Pools), pages+1
			if page.Next == "" {
				return pools, pages, nil
			}
			q.Cursor = page.Next
		}
	}
	if _, _, err := paging(); err != nil { // warm up: the scripts, the connections
		b.Fatal(err)
	}
	rt := testenv.CountRoundTrips(c)
	scans := countScans(c)
	rt0, scans0 := rt.Load(), scans.n.Load()
	pages := 0
	for b.Loop() {
		n, p, err := paging()
		if err != nil {
			b.Fatal(err)
		}
		if n != inspected {
			b.Fatalf("a paging showed %d pools, want %d", n, inspected)
		}
		pages += p
	}
	b.ReportMetric(float64(scans.n.Load()-scans0)/float64(b.N), "scans/op")
	b.ReportMetric(float64(rt.Load()-rt0)/float64(b.N), "rt/op")
	b.ReportMetric(float64(pages)/float64(b.N), "pages/op")

	// Acquire+release pairs beside the paging.
	// every: how often the inspector starts a paging; 0: no inspector,
	// -1: in a loop, each paging as soon as the last ended.
	pairs := func(every time.Duration) (p50, p99 time.Duration, pagings int) {
		const workers, run = 8, 3 * time.Second
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var inspector sync.WaitGroup
		if every != 0 {
			inspector.Add(1)
			go func() {
				defer inspector.Done()
				tick := time.NewTicker(max(every, time.Millisecond))
				defer tick.Stop()
				for {
					if every > 0 {
						select {
						case <-stop:
							return
						case <-tick.C:
						}
					} else {
						select {
						case <-stop:
							return
						default:
						}
					}
					if _, _, err := paging(); err != nil {
						b.Error(err)
						return
					}
					pagings++
				}
			}()
		}
		lat := make([][]time.Duration, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := store.PoolOf(0, "bench-inspect-pairs", fmt.Sprint(w))
				for {
					select {
					case <-stop:
						return
					default:
					}
					o := store.NewOwner()
					start := time.Now()
					g, err := s.Acquire(ctx, p, o, store.Demand{Max: 1, TTL: time.Minute})
					if err == nil {
						_, err = s.Release(ctx, p, o, store.Demand{}, false)
					}
					if err != nil || !g.Granted {
						b.Error(g.Granted, err)
						return
					}
					lat[w] = append(lat[w], time.Since(start))
				}
			}()
		}
		timer := time.NewTimer(run)
		<-timer.C
		close(stop)
		wg.Wait()
		inspector.Wait()
		all := slices.Concat(lat...)
		slices.Sort(all)
		if len(all) == 0 {
			b.Fatal("no pair completed")
		}
		return pct(all, 0.5), pct(all, 0.99), pagings
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	p50, p99, _ := pairs(0)
	b.ReportMetric(us(p50), "pair-p50-µs")
	b.ReportMetric(us(p99), "pair-p99-µs")
	p50, p99, _ = pairs(time.Second)
	b.ReportMetric(us(p50), "pair-p50-µs-paging/s")
	b.ReportMetric(us(p99), "pair-p99-µs-paging/s")
	p50, p99, pagings := pairs(-1)
	b.ReportMetric(us(p50), "pair-p50-µs-paging-loop")
	b.ReportMetric(us(p99), "pair-p99-µs-paging-loop")
	b.ReportMetric(float64(pagings)/3, "loop-pagings/s")
}
