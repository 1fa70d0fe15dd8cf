package conncap_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/redisstore"
)

// BenchmarkAdmit measures admitting and releasing a connection on Redis,
// with the round trips of each (rt/op, counted by a go-redis hook).
func BenchmarkAdmit(b *testing.B) {
	c := testenv.Redis(b)
	store, _ := redisstore.New(c, redisstore.WithPrefix(testenv.Prefix(b, c)))
	caps := newBenchCap(b, store, 1000)
	ctx := context.Background()
	_ = caps.Admit(ctx, "app", "warm", "warm") // load the script
	rt := testenv.CountRoundTrips(c)
	var admits, leaves int64
	i := 0
	for b.Loop() {
		conn := fmt.Sprint("s", i)
		i++
		before := rt.Load()
		if err := caps.Admit(ctx, "app", "alice", conn); err != nil {
			b.Fatal(err)
		}
		admits += rt.Load() - before
		before = rt.Load()
		caps.Leave("app", conn)
		leaves += rt.Load() - before
	}
	b.ReportMetric(float64(admits)/float64(b.N), "admit-rt/op")
	b.ReportMetric(float64(leaves)/float64(b.N), "leave-rt/op")
}

// BenchmarkHeartbeat measures one heartbeat of a node holding 10,000
// connections of 2,000 users, on a single Redis and on the 3-master cluster,
// beside the same client sending 2,000 PINGs in one pipeline (the same number
// of commands, without the scripts) in the same run.
func BenchmarkHeartbeat(b *testing.B) {
	for _, backend := range []struct {
		name   string
		client func(testing.TB) redis.UniversalClient
	}{
		{"redis", func(t testing.TB) redis.UniversalClient { return testenv.Redis(t) }},
		{"cluster", func(t testing.TB) redis.UniversalClient { return testenv.RedisCluster(t) }},
	} {
		c := backend.client(b)
		store, _ := redisstore.New(c, redisstore.WithPrefix(testenv.Prefix(b, c)))
		caps := newBenchCap(b, store, 10)
		ctx := context.Background()
		const users, perUser = 2000, 5
		for u := range users {
			for k := range perUser {
				if err := caps.Admit(ctx, "app", fmt.Sprint("user", u), fmt.Sprint(u, ".", k)); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := caps.Heartbeat(ctx); err != nil { // warm every node's connections
			b.Fatal(err)
		}
		rt := testenv.CountRoundTrips(c)
		b.Run(backend.name+"/heartbeat-10000-conns-2000-users", func(b *testing.B) {
			before := rt.Load()
			for b.Loop() {
				if err := caps.Heartbeat(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rt.Load()-before)/float64(b.N), "rt/op")
		})
		b.Run(backend.name+"/ping-pipeline-2000", func(b *testing.B) {
			before := rt.Load()
			for b.Loop() {
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					for range users {
						p.Ping(ctx)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rt.Load()-before)/float64(b.N), "rt/op")
		})
		b.Run(backend.name+"/ping", func(b *testing.B) {
			for b.Loop() {
				if err := c.Ping(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func newBenchCap(b *testing.B, store keycap.Store, n int) *conncap.Cap {
	l, err := keycap.NewLimiter(store)
	if err != nil {
		b.Fatal(err)
	}
	caps, err := conncap.New(l, conncap.WithDefaultCap(n))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = caps.Close()
		_ = l.Close()
	})
	return caps
}
