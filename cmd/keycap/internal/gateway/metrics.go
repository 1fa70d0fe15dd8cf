package gateway

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/promobserver"
)

// metrics is the gateway's registry: its requests', slots' and
// connections' metrics, and the process's.
type metrics struct {
	reg    *prometheus.Registry
	keycap *promobserver.Observer

	// Per route: routes come from the configuration, codes are classes,
	// outcomes the few below, sources a route's limits' key sources.
	requests *prometheus.CounterVec   // route, code, outcome
	upstream *prometheus.HistogramVec // route
	refusals *prometheus.CounterVec   // route, source
}

// What became of a request, as keycap_gateway_requests_total labels it.
const (
	outcomeUpstream        = "upstream"          // the upstream answered (whatever its status)
	outcomeRefused         = "refused"           // a limit refused it: 429
	outcomeStoreDown       = "store_unavailable" // a limit that fails closed found the store down: 503
	outcomeUnauthorized    = "unauthorized"      // a limit's key was missing (on_missing: refuse): 401
	outcomeTooLarge        = "too_large"         // its body was over max_body: 413
	outcomeRequestTimeout  = "request_timeout"   // its body came too slowly: 408
	outcomeUpstreamError   = "upstream_error"    // the upstream failed: 502
	outcomeUpstreamTimeout = "upstream_timeout"  // the upstream timed out: 504
	outcomeClientGone      = "client_gone"       // the client left before an answer
	outcomeOther           = "other"             // the gateway answered otherwise (a bad path, 405)
)

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// A route's limits share its pool's name: the key's source tells them
	// apart ("reports header:X-User", "reports ip"). A Pusher app's keys
	// are users: its limit keeps the app's name.
	k, err := promobserver.New(reg, promobserver.WithLimitSuffix(func(l keycap.Limit) string {
		if l.Family() != keycap.FamilyApp {
			return ""
		}
		return keySourceOf(l.Key())
	}))
	if err != nil {
		panic(err) // a fresh registry: cannot clash
	}
	m := &metrics{reg: reg, keycap: k,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keycap_gateway_requests_total",
			Help: "Requests, by route, status class (2xx…5xx) and outcome (upstream, refused, unauthorized, …)."},
			[]string{"route", "code", "outcome"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "keycap_gateway_upstream_seconds",
			Help:    "Time from sending a request to the upstream to the end of its response, by route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}},
			[]string{"route"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keycap_gateway_refusals_total",
			Help: "Requests a limit refused, by route and the limit's key source (ip, header:X-User, claim:sub, …; never the key)."},
			[]string{"route", "source"}),
	}
	reg.MustRegister(m.requests, m.upstream, m.refusals)
	return m
}

// request is what the gateway learns of one request of a route, for its
// metrics and logs: its route, and what became of it when the gateway
// answered it itself.
type request struct {
	route   string
	outcome string // "": the upstream answered, or nobody did
	status  int    // the status written, 0 before
	trace   string // the sampled trace it belongs to (traceID), "" if none

	deadline time.Time // a gRPC call's, from its grpc-timeout; zero: none
}

// traceOf is the trace of a request (q's, else read from r).
func traceOf(q *request, r *http.Request) string {
	if q != nil {
		return q.trace
	}
	return traceID(r)
}

func (q *request) set(outcome string) {
	if q != nil {
		q.outcome = outcome
	}
}

type requestKey struct{}

// requestOf returns r's request, nil outside a route.
func requestOf(r *http.Request) *request {
	q, _ := r.Context().Value(requestKey{}).(*request)
	return q
}

// recorder remembers the status a handler writes in its request: the two
// are one allocation per request.
type recorder struct {
	http.ResponseWriter
	q *request
	r request
}

func (w *recorder) WriteHeader(code int) {
	if w.q.status == 0 && code >= 200 || code == http.StatusSwitchingProtocols {
		w.q.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.q.status == 0 {
		w.q.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// upgrades, deadlines).
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// codeClasses are the code label's values, by a status's first digit.
var codeClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// result is what became of a finished request: its outcome label.
func (q *request) result() string {
	switch {
	case q.outcome != "":
		return q.outcome
	case q.status == 0:
		return outcomeClientGone
	}
	return outcomeUpstream
}

// count records a finished request of a route with its outcome.
func (m *metrics) count(q *request, outcome string) {
	code := "none"
	if q.status >= 100 && q.status < 600 {
		code = codeClasses[q.status/100-1]
	}
	c := m.requests.WithLabelValues(q.route, code, outcome)
	if ex := exemplar(q.trace); ex != nil {
		c.(prometheus.ExemplarAdder).AddWithExemplar(1, ex)
		return
	}
	c.Inc()
}

// refusedConns exports a listener's open connections and those it closed
// for max_connections_per_ip.
func (m *metrics) refusedConns(listener string, ll *limitListener) {
	labels := prometheus.Labels{"listener": listener}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "keycap_gateway_connections_refused_total", ConstLabels: labels,
		Help: "New connections closed at once because their address held max_connections_per_ip already, every one in use.",
	}, func() float64 { return float64(ll.refused.Load()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "keycap_gateway_connections_evicted_total", ConstLabels: labels,
		Help: "Unused connections (idle, or never sent a request) closed to make room for a new connection from their address at max_connections_per_ip.",
	}, func() float64 { return float64(ll.evicted.Load()) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "keycap_gateway_connections", ConstLabels: labels,
		Help: "Connections open on the listener.",
	}, func() float64 { return float64(ll.open.Load()) }))
}

func (m *metrics) handler() http.Handler {
	// OpenMetrics to a scraper that asks for it (Prometheus does): the
	// only format that carries exemplars.
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}
