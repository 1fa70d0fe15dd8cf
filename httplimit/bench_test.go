package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
)

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })

func benchLimiters(b *testing.B, store keycap.Store) *httplimit.Limiters {
	l, err := keycap.NewLimiter(store)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ls, err := httplimit.New(l)
	if err != nil {
		b.Fatal(err)
	}
	// One key per client, with room: the row measures the middleware, not
	// refusals.
	_ = ls.For("api", func(r *http.Request) httplimit.Rule {
		return httplimit.Max(1000).By(r.Header.Get("X-User"))
	})
	return ls
}

// BenchmarkThroughput measures requests per second through a real HTTP
// server on loopback, with the middleware on memstore and bare, in
// alternating rounds of the same benchmark so that drift in the machine's
// speed touches both alike. limited/bare is the ratio of the two rates.
func BenchmarkThroughput(b *testing.B) {
	ls := benchLimiters(b, memstore.New())
	bare := httptest.NewServer(hello)
	defer bare.Close()
	limited := httptest.NewServer(ls.Must("api")(hello))
	defer limited.Close()
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			hc := client(g)
			get := func(url string) func(int) error {
				return func(w int) error { return testkit.GetOK(hc, url, "X-User", fmt.Sprint(w)) }
			}
			t := testkit.Alternate(b, g, 500, 100, get(bare.URL), get(limited.URL))
			bareTime, limitedTime := t[0], t[1]
			b.ReportMetric(float64(bareTime)/float64(limitedTime), "limited/bare")
			b.ReportMetric(float64(b.N)/limitedTime.Seconds(), "limited-req/s")
			b.ReportMetric(float64(b.N)/bareTime.Seconds(), "bare-req/s")
		})
	}
}

// BenchmarkOverhead measures the middleware called in-process, without a
// network: what it adds to each request.
func BenchmarkOverhead(b *testing.B) {
	ls := benchLimiters(b, memstore.New())
	for _, h := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", hello},
		{"memstore", ls.Must("api")(hello)},
	} {
		b.Run(h.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-User", "u")
			b.ReportAllocs()
			for b.Loop() {
				h.h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}

func client(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}, Timeout: 30 * time.Second}
}
