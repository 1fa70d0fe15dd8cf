package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/keycap/keycap"
)

// BenchmarkHistoryObserve is the history's cost per request on the hot
// path: a slot acquired and released (two events; the release writes the
// key's slot-time in its table), cycling over 10 to 10,000 keys, against a
// history that is off. Run with -cpu 1,2 for contention.
func BenchmarkHistoryObserve(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		limits := make([]keycap.Limit, n)
		for i := range limits {
			limits[i] = keycap.Spec{Name: "api", Max: 10}.For(fmt.Sprintf("header:X-User=user-%d", i))
		}
		for _, on := range []bool{true, false} {
			name := fmt.Sprintf("keys=%d/on=%v", n, on)
			b.Run(name, func(b *testing.B) {
				h := newHistory()
				if on {
					h.configure(DefaultHistoryKeys)
					defer h.close()
				}
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						l := limits[i%n]
						h.Observe(keycap.Event{Kind: keycap.SlotAcquired, Family: keycap.FamilyApp, Limit: l})
						h.Observe(keycap.Event{Kind: keycap.SlotReleased, Family: keycap.FamilyApp, Limit: l, Held: time.Millisecond})
						i++
					}
				})
			})
		}
	}
}

// BenchmarkHistoryMemory reports the heap a limit's key table takes per
// key, filled with 10,000 keys of 24 bytes (each refused once, each
// released once).
func BenchmarkHistoryMemory(b *testing.B) {
	const n = 10000
	limits := make([]keycap.Limit, n)
	for i := range limits {
		limits[i] = keycap.Spec{Name: "api", Max: 10}.For(fmt.Sprintf("header:X-User=user-%05d", i))
	}
	var perKey float64
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		h := newHistory()
		h.configure(n)
		h.close() // the table stays; only the clock stops
		h.on.Store(true)
		for _, l := range limits {
			h.Observe(keycap.Event{Kind: keycap.LimitExceeded, Family: keycap.FamilyApp, Limit: l})
			h.Observe(keycap.Event{Kind: keycap.SlotReleased, Family: keycap.FamilyApp, Limit: l, Held: time.Second})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(h)
	}
	b.ReportMetric(perKey, "bytes/key")
	b.ReportMetric(perKey*n/(1<<20), "MiB/10k-keys")
}

// BenchmarkIncidentPage is the time to render the admin page (its summary
// read from the store, cached as for viewers, and its history) with 10,000
// keys in the history of each of the route's two limits, 10 or 1,000 keys
// per table shown, sorted by refusals; and the JSON of the history.
func BenchmarkIncidentPage(b *testing.B) {
	cfg, err := ParseConfig("bench.yaml", []byte(`upstream: http://127.0.0.1:1
admin_api: {token: 0123456789abcdef0123}
routes:
  - name: api
    path: /
    limits:
      - {max: 5, key: "header:X-User"}
      - {max: 50, key: ip}
`))
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	s := &Server{gw: g, log: slog.New(slog.DiscardHandler), cfg: cfg}
	for i := range 10000 {
		for _, key := range []string{fmt.Sprintf("header:X-User=user-%05d", i), fmt.Sprintf("ip:10.0.%d.%d", i/256, i%256)} {
			l := keycap.Spec{Name: "api", Max: 5}.For(key)
			for range i%7 + 1 {
				g.history.Observe(keycap.Event{Kind: keycap.LimitExceeded, Family: keycap.FamilyApp, Limit: l})
			}
			g.history.Observe(keycap.Event{Kind: keycap.SlotReleased, Family: keycap.FamilyApp, Limit: l, Held: time.Duration(i) * time.Millisecond})
		}
	}
	mux := http.NewServeMux()
	s.adminRoutes(mux)
	for _, path := range []string{"/admin/", "/admin/?n=1000", "/admin/api/history"} {
		b.Run(path, func(b *testing.B) {
			bytes := 0
			for range b.N {
				req := httptest.NewRequest(http.MethodGet, path, nil)
				req.Header.Set("Authorization", "Bearer 0123456789abcdef0123")
				w := httptest.NewRecorder()
				mux.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", path, w.Code, w.Body)
				}
				bytes = w.Body.Len()
				_, _ = io.Copy(io.Discard, w.Body)
			}
			b.ReportMetric(float64(bytes)/1024, "KiB")
		})
	}
}
