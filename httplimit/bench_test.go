package httplimit_test

import (
	"context"
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

func benchLimiters(b *testing.B, store keycap.Store, opts ...keycap.Option) *httplimit.Limiters {
	l, err := keycap.NewLimiter(store, opts...)
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
	// The same beside a second limit, enforced or shadow: what a shadow
	// candidate costs against another limit.
	_ = ls.For("two", func(r *http.Request) httplimit.Rule {
		return httplimit.All(httplimit.Max(1000).By(r.Header.Get("X-User")), httplimit.Max(1000).By("tenant"))
	})
	_ = ls.For("shadow", func(r *http.Request) httplimit.Rule {
		return httplimit.All(httplimit.Max(1000).By(r.Header.Get("X-User")), httplimit.Limit(keycap.Spec{Max: 1, Shadow: true}).By("tenant"))
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
	// See and steer: inspection on, overrides read (none set, and 1,000
	// set for other keys).
	steered := benchLimiters(b, memstore.New(), keycap.WithInspection(keycap.InspectOptions{}), keycap.WithOverrides(time.Hour))
	overridden := memstore.New()
	ol, err := keycap.NewLimiter(overridden, keycap.WithOverrides(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer ol.Close()
	for i := range 1000 {
		if err := ol.SetOverride(context.Background(), keycap.Override{Name: "api", Key: fmt.Sprint("other:", i), Max: 5}); err != nil {
			b.Fatal(err)
		}
	}
	many := benchLimiters(b, overridden, keycap.WithOverrides(time.Hour))
	for _, h := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", hello},
		{"memstore", ls.Must("api")(hello)},
		{"memstore-inspection-overrides", steered.Must("api")(hello)},
		{"memstore-1000-overrides", many.Must("api")(hello)},
		{"memstore-two-limits", ls.Must("two")(hello)},
		{"memstore-with-shadow", ls.Must("shadow")(hello)},
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
