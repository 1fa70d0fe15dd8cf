package gateway_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap/gateway"
	"github.com/keycap/keycap/internal/testenv"
)

// BenchmarkProxy measures requests per second and latency through the
// gateway, and through a bare httputil.ReverseProxy (with the same transport
// and rewrite) to the same upstream, in alternating rounds of one benchmark
// so that drift in the machine's speed touches both alike. Both run
// in-process behind a real HTTP server on loopback; the load generator is
// the benchmark's own keep-alive clients, one user each. gateway/bare is the
// ratio of the two rates; the p50 and p99 latencies are reported for each.
// The upstream=5ms rows proxy to an upstream that takes 5 ms per request.
func BenchmarkProxy(b *testing.B) {
	// Two upstreams: one that answers at once (the worst case: the
	// gateway's own costs show in full) and one that spends 5 ms waiting,
	// as an application calling its database does.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/io" {
			time.Sleep(5 * time.Millisecond)
		}
		_, _ = io.WriteString(w, "hello")
	}))
	defer upstream.Close()
	bare := httptest.NewServer(bareProxy(b, upstream.URL))
	defer bare.Close()
	stores := []struct{ name, yaml string }{
		{"memstore", "store: {type: memory}\n"},
		{"redis", "store: {type: redis, url: 'redis://" + testenv.RedisAddr() + "', prefix: '" + testenv.Prefix(b, testenv.Redis(b)) + "'}\n"},
	}
	for _, st := range stores {
		cfg, err := gateway.ParseConfig("bench.yaml", []byte(st.yaml+"upstream: "+upstream.URL+`
routes:
  - name: api
    path: /
    limits:
      - max: 1000   # room for every request: the row measures the gateway, not refusals
        key: header:X-User
`))
		if err != nil {
			b.Fatal(err)
		}
		g, err := gateway.New(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		gw := httptest.NewServer(g)
		for _, conc := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", st.name, conc), func(b *testing.B) {
				benchPair(b, conc, bare.URL, gw.URL)
			})
		}
		b.Run(st.name+"/clients=16/upstream=5ms", func(b *testing.B) {
			benchPair(b, 16, bare.URL+"/io", gw.URL+"/io")
		})
		gw.Close()
		g.Close()
	}
}

// benchPair runs b.N requests against each of bare and gw in alternating
// rounds, from conc clients.
func benchPair(b *testing.B, conc int, bare, gw string) {
	tr := &http.Transport{MaxIdleConnsPerHost: conc}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	get := func(url, user string) (time.Duration, error) {
		r, _ := http.NewRequest(http.MethodGet, url, nil)
		r.Header.Set("X-User", user)
		start := time.Now()
		resp, err := hc.Do(r)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		return time.Since(start), nil
	}
	run := func(url string, n int, lat *[]time.Duration) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		start := time.Now()
		for c := range conc {
			wg.Go(func() {
				user := fmt.Sprint(c)
				var mine []time.Duration
				for next.Add(1) <= int64(n) {
					d, err := get(url, user)
					if err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, d)
				}
				mu.Lock()
				*lat = append(*lat, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	var discard []time.Duration
	run(bare, 200, &discard)
	run(gw, 200, &discard)
	var bareTime, gwTime time.Duration
	var bareLat, gwLat []time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, 500)
		bareTime += run(bare, n, &bareLat)
		gwTime += run(gw, n, &gwLat)
		done += n
	}
	b.StopTimer()
	b.ReportMetric(float64(bareTime)/float64(gwTime), "gateway/bare")
	b.ReportMetric(float64(b.N)/gwTime.Seconds(), "gateway-req/s")
	b.ReportMetric(float64(b.N)/bareTime.Seconds(), "bare-req/s")
	for _, l := range []struct {
		name string
		v    []time.Duration
	}{{"gateway", gwLat}, {"bare", bareLat}} {
		slices.Sort(l.v)
		b.ReportMetric(float64(l.v[len(l.v)/2].Microseconds()), l.name+"-p50-us")
		b.ReportMetric(float64(l.v[len(l.v)*99/100].Microseconds()), l.name+"-p99-us")
	}
}

// bareProxy is the baseline: httputil.ReverseProxy with the gateway's
// transport settings and rewrite, and nothing else.
func bareProxy(b *testing.B, target string) http.Handler {
	u, err := url.Parse(target)
	if err != nil {
		b.Fatal(err)
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		},
		FlushInterval: -1,
	}
}
