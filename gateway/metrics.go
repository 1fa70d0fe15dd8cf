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
	conns  *promobserver.ConnMetrics
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	k, err := promobserver.New(reg)
	if err != nil {
		panic(err) // a fresh registry: cannot clash
	}
	c, err := promobserver.NewConnMetrics(reg)
	if err != nil {
		panic(err)
	}
	return &metrics{reg: reg, keycap: k, conns: c}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
