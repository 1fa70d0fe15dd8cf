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
	"testing"
	"time"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
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
	upstream := benchUpstream(b)
	bare := httptest.NewServer(bareProxy(b, upstream.URL))
	defer bare.Close()
	stores := []struct{ name, yaml string }{
		{"memstore", "store: {type: memory}\n"},
		{"redis", "store: {type: redis, url: 'redis://" + testenv.RedisAddr() + "', prefix: '" + testenv.Prefix(b, testenv.Redis(b)) + "'}\n"},
	}
	for _, st := range stores {
		g, gw := benchGateway(b, st.yaml, upstream.URL)
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

// benchUpstream serves two paths: / answers at once (the worst case: a
// proxy's own costs show in full), /io after 5 ms, as an application
// calling its database does.
func benchUpstream(b *testing.B) *httptest.Server {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/io" {
			time.Sleep(5 * time.Millisecond)
		}
		_, _ = io.WriteString(w, "hello")
	}))
	b.Cleanup(upstream.Close)
	return upstream
}

// benchGateway starts a gateway on the store of storeYAML in front of
// upstream, one route over every path with one limit per X-User that has
// room for every request (the rows measure the gateway, not refusals). The
// caller closes both.
func benchGateway(b *testing.B, storeYAML, upstream string) (*gateway.Gateway, *httptest.Server) {
	g, err := gateway.New(benchConfig(b, storeYAML, upstream), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	return g, httptest.NewServer(g)
}

// benchConfig is benchGateway's configuration.
func benchConfig(b *testing.B, storeYAML, upstream string) *gateway.Config {
	cfg, err := gateway.ParseConfig("bench.yaml", []byte(storeYAML+"upstream: "+upstream+`
routes:
  - name: api
    path: /
    limits:
      - max: 1000
        key: header:X-User
`))
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// BenchmarkProxyAfterReload measures a gateway on Redis that was reloaded
// onto another Redis store (its Limiter's store is then the handover
// between the two, for good) against a gateway started on such a store, in
// alternating rounds: reloaded/fresh is the ratio of their rates.
func BenchmarkProxyAfterReload(b *testing.B) {
	upstream := benchUpstream(b)
	prefix := testenv.Prefix(b, testenv.Redis(b))
	store := func(name string) string {
		return "store: {type: redis, url: 'redis://" + testenv.RedisAddr() + "', prefix: '" + prefix + name + ":'}\n"
	}
	fresh, freshSrv := benchGateway(b, store("fresh"), upstream.URL)
	defer fresh.Close()
	defer freshSrv.Close()
	reloaded, reloadedSrv := benchGateway(b, store("old"), upstream.URL)
	defer reloaded.Close()
	defer reloadedSrv.Close()
	if err := reloaded.Reload(benchConfig(b, store("new"), upstream.URL)); err != nil {
		b.Fatal(err)
	}
	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("redis/clients=%d", conc), func(b *testing.B) {
			benchVs(b, conc, "fresh", freshSrv.URL, "reloaded", reloadedSrv.URL)
		})
	}
}

// BenchmarkProxyHistory is the admin page's cost on the hot path: a gateway
// with the admin API on (its history recording every request, slot and
// refusal) against the same gateway with it off, on memstore (where the
// gateway's own costs show the most), in alternating rounds: on/off is the
// ratio of their rates.
func BenchmarkProxyHistory(b *testing.B) {
	upstream := benchUpstream(b)
	const st = "store: {type: memory}\n"
	off, offSrv := benchGateway(b, st, upstream.URL)
	defer off.Close()
	defer offSrv.Close()
	on, onSrv := benchGateway(b, st+"admin_api: {token: 0123456789abcdef0123}\n", upstream.URL)
	defer on.Close()
	defer onSrv.Close()
	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("memstore/clients=%d", conc), func(b *testing.B) {
			benchVs(b, conc, "off", offSrv.URL, "on", onSrv.URL)
		})
	}
}

// benchPair runs b.N requests against each of bare and gw in alternating
// rounds, from conc clients.
func benchPair(b *testing.B, conc int, bare, gw string) {
	benchVs(b, conc, "bare", bare, "gateway", gw)
}

// benchVs runs b.N requests against each of two proxies, named a and b in
// the metrics, in alternating rounds, from conc clients: <b>/<a> is the
// ratio of their rates.
func benchVs(b *testing.B, conc int, aName, aURL, bName, bURL string) {
	bare, gw := aURL, bURL
	tr := &http.Transport{MaxIdleConnsPerHost: conc}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	// Latencies per worker: each index is one goroutine at a time.
	bareLat, gwLat := make([][]time.Duration, conc), make([][]time.Duration, conc)
	get := func(url string, lat [][]time.Duration) func(int) error {
		return func(w int) error {
			start := time.Now()
			if err := testkit.GetOK(hc, url, "X-User", fmt.Sprint(w)); err != nil {
				return err
			}
			lat[w] = append(lat[w], time.Since(start))
			return nil
		}
	}
	testkit.Rounds(b, conc, 200, get(bare, bareLat))
	testkit.Rounds(b, conc, 200, get(gw, gwLat))
	clear(bareLat)
	clear(gwLat)
	t := testkit.Alternate(b, conc, 500, 0, get(bare, bareLat), get(gw, gwLat))
	bareTime, gwTime := t[0], t[1]
	b.ReportMetric(float64(bareTime)/float64(gwTime), bName+"/"+aName)
	b.ReportMetric(float64(b.N)/gwTime.Seconds(), bName+"-req/s")
	b.ReportMetric(float64(b.N)/bareTime.Seconds(), aName+"-req/s")
	for _, l := range []struct {
		name string
		lat  [][]time.Duration
	}{{bName, gwLat}, {aName, bareLat}} {
		v := slices.Concat(l.lat...)
		slices.Sort(v)
		b.ReportMetric(float64(v[len(v)/2].Microseconds()), l.name+"-p50-us")
		b.ReportMetric(float64(v[len(v)*99/100].Microseconds()), l.name+"-p99-us")
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
