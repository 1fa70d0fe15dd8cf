package promobserver

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keycap/keycap/pause"
)

// PauseMetrics is a pause.Observer that shows who throttles you: Prometheus
// metrics per API.
//
//	keycap_api_throttled_total{api,status}      throttled responses
//	keycap_api_exhausted_total{api}             responses that said nothing remains
//	keycap_api_pauses_total{api}                pauses started or extended
//	keycap_api_pause_seconds{api}               how long each pause lasts
//	keycap_api_refused_total{api,reason}        calls refused or jobs released: "paused" or "paced"
//	keycap_api_retries_in_place_total{api}      throttled requests sent again after a wait in place
//	keycap_api_store_failures_total             store outages
//
// API names are labels: keep them to a bounded set (hosts, vendors), not one
// per user.
type PauseMetrics struct {
	throttled, refused         *prometheus.CounterVec
	exhausted, pauses, retries *prometheus.CounterVec
	length                     *prometheus.HistogramVec
	failures                   prometheus.Counter
}

// NewPauseMetrics returns PauseMetrics registered with reg. Pass it to
// pause.WithObserver.
func NewPauseMetrics(reg prometheus.Registerer, opts ...Option) (*PauseMetrics, error) {
	c := config{namespace: "keycap", holdBuckets: []float64{1, 2, 5, 10, 30, 60, 300, 900, 3600, 86400}}
	for _, o := range opts {
		o(&c)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: c.namespace, Name: name, Help: help}, labels)
	}
	m := &PauseMetrics{
		throttled: counter("api_throttled_total", "Throttled responses, by API and status.", "api", "status"),
		exhausted: counter("api_exhausted_total", "Responses that said nothing remains until a reset.", "api"),
		pauses:    counter("api_pauses_total", "Pauses started or extended.", "api"),
		refused:   counter("api_refused_total", "Calls refused unsent or jobs released, because the API was paused or over its rate.", "api", "reason"),
		retries:   counter("api_retries_in_place_total", "Throttled requests sent again after a wait in place.", "api"),
		length: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: c.namespace, Name: "api_pause_seconds",
			Help: "How long pauses last.", Buckets: c.holdBuckets}, []string{"api"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: c.namespace, Name: "api_store_failures_total",
			Help: "Store outages met while checking or recording pauses."}),
	}
	for _, col := range []prometheus.Collector{m.throttled, m.exhausted, m.pauses, m.refused, m.retries, m.length, m.failures} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ObservePause implements pause.Observer.
func (m *PauseMetrics) ObservePause(e pause.Event) {
	switch e.Kind {
	case pause.Throttled:
		m.throttled.WithLabelValues(e.API, strconv.Itoa(e.Status)).Inc()
	case pause.Exhausted:
		m.exhausted.WithLabelValues(e.API).Inc()
	case pause.Paused:
		m.pauses.WithLabelValues(e.API).Inc()
		m.length.WithLabelValues(e.API).Observe(e.Wait.Seconds())
	case pause.Refused:
		reason := "paused"
		if e.Paced {
			reason = "paced"
		}
		m.refused.WithLabelValues(e.API, reason).Inc()
	case pause.RetriedInPlace:
		m.retries.WithLabelValues(e.API).Inc()
	case pause.StoreFailed:
		m.failures.Inc()
	}
}
