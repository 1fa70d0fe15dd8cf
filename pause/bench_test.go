package pause_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/redisstore"
)

// BenchmarkUnpausedRequest measures a GET to a loopback server through a bare
// http.Transport and through pause.Transport over it, with pauses in memstore
// and in Redis (rt/op: Redis round trips per request, counted by a go-redis
// hook), in the same run.
func BenchmarkUnpausedRequest(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	bare := &http.Transport{MaxIdleConnsPerHost: 8}
	defer bare.CloseIdleConnections()
	get := func(b *testing.B, c *http.Client) {
		resp, err := c.Get(srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	run := func(b *testing.B, rt http.RoundTripper) {
		c := &http.Client{Transport: rt}
		for range 20 {
			get(b, c) // warm the connections (and the script, on Redis)
		}
		for b.Loop() {
			get(b, c)
		}
	}
	mem, _ := pause.New(benchLimiter(b, memstore.New()))
	rdb := testenv.Redis(b)
	store, _ := redisstore.New(rdb, redisstore.WithPrefix(testenv.Prefix(b, rdb)))
	red, _ := pause.New(benchLimiter(b, store))
	b.Run("bare", func(b *testing.B) { run(b, bare) })
	b.Run("memstore", func(b *testing.B) { run(b, mem.Transport(bare)) })
	b.Run("redis", func(b *testing.B) {
		counter := testenv.CountRoundTrips(rdb)
		c := &http.Client{Transport: red.Transport(bare)}
		for range 20 {
			get(b, c)
		}
		before := counter.Load()
		for b.Loop() {
			get(b, c)
		}
		b.ReportMetric(float64(counter.Load()-before)/float64(b.N), "rt/op")
	})
}

// canned answers every request at once, without a network: it isolates what
// pause.Transport itself costs.
type canned struct{}

func (canned) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{
		"Content-Type":   {"application/json"},
		"Content-Length": {"2"},
		"Date":           {"Mon, 30 Nov 2026 12:00:00 GMT"},
		"Server":         {"vendor"},
	}
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// BenchmarkOverhead measures what pause.Transport (memstore) adds to a
// request in-process, beside the same canned round trip without it.
func BenchmarkOverhead(b *testing.B) {
	ps, _ := pause.New(benchLimiter(b, memstore.New()))
	req, _ := http.NewRequest(http.MethodGet, "http://vendor.example/x", nil)
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"bare", canned{}}, {"memstore", ps.Transport(canned{})}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tc.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}

func benchLimiter(b *testing.B, s keycap.Store) *keycap.Limiter {
	l, err := keycap.NewLimiter(s)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}
