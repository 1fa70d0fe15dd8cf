package pause_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
)

// BenchmarkUnpausedRequest measures a GET to a loopback server through a bare
// http.Transport and through pause.Transport over it with pauses in memstore,
// in the same run. The same on Redis, with its round trips, is
// redisstore's BenchmarkUnpausedRequest.
func BenchmarkUnpausedRequest(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	bare := &http.Transport{MaxIdleConnsPerHost: 8}
	defer bare.CloseIdleConnections()
	mem, err := pause.New(benchLimiter(b, memstore.New()))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"bare", bare}, {"memstore", mem.Transport(bare)}} {
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
				get() // warm the connections
			}
			for b.Loop() {
				get()
			}
		})
	}
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
