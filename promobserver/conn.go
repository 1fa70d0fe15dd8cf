package promobserver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keycap/keycap/conncap"
)

// ConnMetrics is a conncap.Observer: Prometheus metrics of connection caps,
// labelled by app only, never by user.
//
//	keycap_conn_admitted_total{app}     connections admitted (counted, or uncounted while failing open)
//	keycap_conn_refused_total{app}      connections refused (over the cap, or the store failing closed)
//	keycap_conn_left_total{app}         connections gone
//	keycap_conn_open{app}               connections this node holds
//	keycap_conn_ghosts_dropped_total    ghosts dropped by heartbeats
//	keycap_conn_store_failures_total    store outages
type ConnMetrics struct {
	admitted, refused, left *prometheus.CounterVec
	open                    *prometheus.GaugeVec
	ghosts, failures        prometheus.Counter
}

// NewConnMetrics returns ConnMetrics registered with reg. Pass it to
// conncap.WithObserver.
func NewConnMetrics(reg prometheus.Registerer, opts ...Option) (*ConnMetrics, error) {
	c := config{namespace: "keycap"}
	for _, o := range opts {
		o(&c)
	}
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: c.namespace, Name: name, Help: help}, []string{"app"})
	}
	m := &ConnMetrics{
		admitted: vec("conn_admitted_total", "Connections admitted."),
		refused:  vec("conn_refused_total", "Connections refused: over the cap, or the store failing closed."),
		left:     vec("conn_left_total", "Connections gone."),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: c.namespace, Name: "conn_open",
			Help: "Connections this node holds."}, []string{"app"}),
		ghosts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: c.namespace, Name: "conn_ghosts_dropped_total",
			Help: "Connections the store still held after they left, dropped by heartbeats."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: c.namespace, Name: "conn_store_failures_total",
			Help: "Store outages met by connection caps."}),
	}
	for _, col := range []prometheus.Collector{m.admitted, m.refused, m.left, m.open, m.ghosts, m.failures} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ObserveConn implements conncap.Observer.
func (m *ConnMetrics) ObserveConn(e conncap.Event) {
	switch e.Kind {
	case conncap.Admitted:
		m.admitted.WithLabelValues(e.App).Inc()
		m.open.WithLabelValues(e.App).Inc()
	case conncap.Refused:
		m.refused.WithLabelValues(e.App).Inc()
	case conncap.Left:
		m.left.WithLabelValues(e.App).Inc()
		m.open.WithLabelValues(e.App).Dec()
	case conncap.GhostsDropped:
		m.ghosts.Add(float64(e.Count))
	case conncap.StoreFailed:
		m.failures.Inc()
	}
}
