package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keycap/keycap/promobserver"
)

// metrics is the gateway's registry: its slots' and connections' metrics,
// and the process's.
type metrics struct {
	reg    *prometheus.Registry
	keycap *promobserver.Observer
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	k, err := promobserver.New(reg)
	if err != nil {
		panic(err) // a fresh registry: cannot clash
	}
	return &metrics{reg: reg, keycap: k}
}

// refusedConns exports a listener's open connections and those it closed
// for being over max_connections_per_ip.
func (m *metrics) refusedConns(listener string, ll *limitListener) {
	labels := prometheus.Labels{"listener": listener}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "keycap_gateway_connections_refused_total", ConstLabels: labels,
		Help: "Connections closed at once because their address held max_connections_per_ip already.",
	}, func() float64 { return float64(ll.refused.Load()) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "keycap_gateway_connections", ConstLabels: labels,
		Help: "Connections open on the listener.",
	}, func() float64 { return float64(ll.open.Load()) }))
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
