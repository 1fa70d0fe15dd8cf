package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/pause"
)

// The front doors on Redis: what each adds in round trips (rt/op, counted by
// a go-redis hook) and time. Their in-process overhead on memstore is
// measured beside each front door's own code.

func benchLimiter(b *testing.B, s keycap.Store) *keycap.Limiter {
	l, err := keycap.NewLimiter(s)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })

// BenchmarkHTTPRoundTrips counts the Redis round trips each request through
// httplimit adds, one request after another: an acquire and a release, which
// the request does not wait for and which shares the next request's pipeline
// (batch.go) — one round trip a request.
func BenchmarkHTTPRoundTrips(b *testing.B) {
	c := testenv.Redis(b)
	ls, err := httplimit.New(benchLimiter(b, newStore(b, c, testenv.Prefix(b, c))))
	if err != nil {
		b.Fatal(err)
	}
	_ = ls.For("api", func(r *http.Request) httplimit.Rule { return httplimit.Max(1000).By(r.Header.Get("X-User")) })
	h := ls.Must("api")(hello)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-User", "u")
	h.ServeHTTP(httptest.NewRecorder(), r) // load the script, open a connection
	rt := testenv.CountRoundTrips(c)
	before := rt.Load()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
	b.ReportMetric(float64(rt.Load()-before)/float64(b.N), "rt/op")
}

// BenchmarkUnpausedRequest measures a GET to a loopback server through a bare
// http.Transport and through pause.Transport with its pauses in Redis, in the
// same run.
func BenchmarkUnpausedRequest(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	bare := &http.Transport{MaxIdleConnsPerHost: 8}
	defer bare.CloseIdleConnections()
	rdb := testenv.Redis(b)
	ps, err := pause.New(benchLimiter(b, newStore(b, rdb, testenv.Prefix(b, rdb))))
	if err != nil {
		b.Fatal(err)
	}
	counter := testenv.CountRoundTrips(rdb)
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"bare", bare}, {"redis", ps.Transport(bare)}} {
		b.Run(tc.name, func(b *testing.B) {
			c := &http.Client{Transport: tc.rt}
			get := func() {
				resp, err := c.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			for range 20 {
				get() // warm the connections and the script
			}
			before := counter.Load()
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64(counter.Load()-before)/float64(b.N), "rt/op")
		})
	}
}

func newBenchCap(b *testing.B, store keycap.Store, n int) *conncap.Cap {
	caps, err := conncap.New(benchLimiter(b, store), conncap.WithDefaultCap(n))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = caps.Close() })
	return caps
}

// BenchmarkAdmit measures admitting and releasing a connection on Redis,
// with the round trips of each.
func BenchmarkAdmit(b *testing.B) {
	c := testenv.Redis(b)
	caps := newBenchCap(b, newStore(b, c, testenv.Prefix(b, c)), 1000)
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
// of commands, without the scripts) in the same run. In the "-shared" case
// every user also has a connection on another node, so that the heartbeat
// cannot tell from a pool's size alone that it holds no ghost of its node.
// script-ms/op is the time Redis spent in the sync scripts (INFO
// commandstats) and redis-cpu-ms/op its whole process's CPU: on a cluster,
// the sums over its masters.
func BenchmarkHeartbeat(b *testing.B) {
	for _, backend := range backends {
		c := backend.client(b)
		rt := testenv.CountRoundTrips(c)
		ctx := context.Background()
		const users, perUser = 2000, 5
		for _, shared := range []bool{false, true} {
			store := newStore(b, c, testenv.Prefix(b, c))
			caps := newBenchCap(b, store, 10)
			var other *conncap.Cap
			if shared {
				other = newBenchCap(b, store, 10)
			}
			for u := range users {
				user := fmt.Sprint("user", u)
				for k := range perUser {
					if err := caps.Admit(ctx, "app", user, fmt.Sprint(u, ".", k)); err != nil {
						b.Fatal(err)
					}
				}
				if other != nil {
					if err := other.Admit(ctx, "app", user, fmt.Sprint(u, ".other")); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := caps.Heartbeat(ctx); err != nil { // warm every node's connections
				b.Fatal(err)
			}
			name := backend.name + "/heartbeat-10000-conns-2000-users"
			if shared {
				name += "-shared"
			}
			b.Run(name, func(b *testing.B) {
				before := rt.Load()
				cpu := serverCPU(b, c)
				usec, _ := scriptUsec(b, c) // only the sync scripts run meanwhile
				for b.Loop() {
					if err := caps.Heartbeat(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(rt.Load()-before)/float64(b.N), "rt/op")
				b.ReportMetric((serverCPU(b, c)-cpu)/float64(b.N), "redis-cpu-ms/op")
				after, _ := scriptUsec(b, c)
				b.ReportMetric((after-usec)/1000/float64(b.N), "script-ms/op")
			})
		}
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
