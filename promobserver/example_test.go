package promobserver_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/promobserver"
)

// One Observer on the Limiter exports the events of every front door built
// on it. Series are labelled by limit name, never by key, so a million
// users make no more series than one.
func Example() {
	// An application passes prometheus.DefaultRegisterer and serves
	// promhttp.Handler() at /metrics; the example uses a registry of its own.
	reg := prometheus.NewRegistry()
	obs, err := promobserver.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	// User 42 runs one export; a second at the same time is refused.
	ctx := context.Background()
	exports := keycap.Spec{Name: "exports", Max: 1}.For("user:42")
	lease, _ := limiter.Acquire(ctx, exports)
	_, err = limiter.Acquire(ctx, exports)
	fmt.Println("second export:", err)
	lease.Release()

	// What a scrape of /metrics shows, one line per series.
	printSeries(reg, "keycap_slots_acquired_total", "keycap_limit_exceeded_total",
		"keycap_slots_released_total", "keycap_slots_in_use")
	// Output:
	// second export: keycap: limit exceeded: exports (max 1)
	// keycap_limit_exceeded_total{family="app",limit="exports",shadow="false"} 1
	// keycap_slots_acquired_total{family="app",limit="exports",shadow="false"} 1
	// keycap_slots_in_use{family="app",limit="exports",shadow="false"} 0
	// keycap_slots_released_total{family="app",limit="exports",shadow="false"} 1
}

// The same Observer counts what vendors' APIs do to you: throttled
// responses per API and status, pauses, and calls held back while paused.
func Example_pauses() {
	reg := prometheus.NewRegistry()
	obs, err := promobserver.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	pauses, err := pause.New(limiter)
	if err != nil {
		log.Fatal(err)
	}

	// A vendor that asks for two minutes of quiet.
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer vendor.Close()
	// Name the API, as a label: a bounded set (vendors), never one per user.
	api := pause.WithAPIName(func(*http.Request) string { return "vendor" })
	client := &http.Client{Transport: pauses.Transport(nil, api)}

	resp, err := client.Get(vendor.URL) // the 429 pauses the API
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	_, err = client.Get(vendor.URL) // not sent: refused with a *pause.PausedError
	fmt.Println("second call refused:", err != nil)

	printSeries(reg, "keycap_api_throttled_total", "keycap_api_pauses_total", "keycap_api_held_total")
	// Output:
	// second call refused: true
	// keycap_api_held_total{api="vendor",reason="paused"} 1
	// keycap_api_pauses_total{api="vendor"} 1
	// keycap_api_throttled_total{api="vendor",status="429"} 1
}

// printSeries prints the series of the named metrics as a scrape shows
// them: name{labels} value.
func printSeries(reg *prometheus.Registry, names ...string) {
	families, err := reg.Gather() // sorted by name, then by labels
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range families {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetCounter().GetValue()
			if g := m.GetGauge(); g != nil {
				v = g.GetValue()
			}
			fmt.Printf("%s{%s} %v\n", mf.GetName(), strings.Join(labels, ","), v)
		}
	}
}
