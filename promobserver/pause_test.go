package promobserver_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/promobserver"
)

// TestPauses: API pauses report through the same Observer.
func TestPauses(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := promobserver.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ps, err := pause.New(l)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		if n == 1 {
			w.Header().Set("Retry-After", "0") // short: retried in place
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		if n == 2 {
			w.Header().Set("Retry-After", "60") // long: the API pauses
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	c := &http.Client{Transport: ps.Transport(nil, pause.WithAPIName(func(*http.Request) string { return "vendor" }))}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := c.Get(srv.URL); !errors.Is(err, pause.ErrPaused) {
		t.Fatalf("third call: %v", err)
	}
	want := `
# HELP keycap_api_throttled_total Throttled responses, by API and status.
# TYPE keycap_api_throttled_total counter
keycap_api_throttled_total{api="vendor",status="429"} 1
keycap_api_throttled_total{api="vendor",status="503"} 1
# HELP keycap_api_retries_in_place_total Throttled requests sent again after a wait in place.
# TYPE keycap_api_retries_in_place_total counter
keycap_api_retries_in_place_total{api="vendor"} 1
# HELP keycap_api_held_total Calls refused unsent or jobs released, because the API was paused or over its rate.
# TYPE keycap_api_held_total counter
keycap_api_held_total{api="vendor",reason="paused"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"keycap_api_throttled_total", "keycap_api_retries_in_place_total", "keycap_api_held_total"); err != nil {
		t.Fatal(err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "keycap_api_pause_seconds" {
			if h := mf.GetMetric()[0].GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() < 59 {
				t.Fatalf("pause lengths: %d samples, sum %v; want 1 pause of 60 s (a Retry-After of 0 pauses nothing)", h.GetSampleCount(), h.GetSampleSum())
			}
			return
		}
	}
	t.Fatal("no keycap_api_pause_seconds")
}
