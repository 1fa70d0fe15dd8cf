// Package promobserver exports keycap's events as Prometheus metrics: a
// keycap.Observer to pass to keycap.WithObserver.
//
//	obs, err := promobserver.New(prometheus.DefaultRegisterer)
//	limiter, err := keycap.NewLimiter(store, keycap.WithObserver(obs))
//
// Metrics are labelled by limit name only, never by key: keys are unbounded
// (users, IPs, tenants) and would explode the number of series. Limit names
// come from code (limiter names, job kinds, Pusher apps), so they are few.
//
//	keycap_slots_acquired_total{limit}     slots granted
//	keycap_limit_exceeded_total{limit}     refusals
//	keycap_slots_released_total{limit}     slots released
//	keycap_slots_in_use{limit}             acquired minus released, in this process
//	keycap_leases_lost_total{limit}        leases found gone on renewal
//	keycap_wait_seconds{limit,outcome}     time spent waiting: outcome "acquired" or "exceeded"
//	keycap_hold_seconds{limit}             time a slot was held, on release
//	keycap_store_failures_total{limit}     store outages, counted at their first failure
//	keycap_store_up                        0 during an outage, else 1
package promobserver

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keycap/keycap"
)

// Observer is a keycap.Observer that updates Prometheus metrics.
type Observer struct {
	acquired, exceeded, released, lost, failures *prometheus.CounterVec
	inUse                                        *prometheus.GaugeVec
	wait, hold                                   *prometheus.HistogramVec
	up                                           prometheus.Gauge

	byName sync.Map // limit name → *series
}

// series caches the children of one limit name, so that an event costs no
// label lookup.
type series struct {
	acquired, exceeded, released, lost, failures prometheus.Counter
	inUse                                        prometheus.Gauge
	waitOK, waitRefused, hold                    prometheus.Observer
}

// An Option configures an Observer.
type Option func(*config)

type config struct {
	namespace   string
	waitBuckets []float64
	holdBuckets []float64
}

// WithNamespace replaces the metrics' "keycap" prefix.
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithWaitBuckets sets the buckets of keycap_wait_seconds (default: 1 ms to
// 10 s).
func WithWaitBuckets(b []float64) Option { return func(c *config) { c.waitBuckets = b } }

// WithHoldBuckets sets the buckets of keycap_hold_seconds (default: 5 ms to
// about 20 min).
func WithHoldBuckets(b []float64) Option { return func(c *config) { c.holdBuckets = b } }

// New returns an Observer whose metrics are registered with reg.
func New(reg prometheus.Registerer, opts ...Option) (*Observer, error) {
	c := config{
		namespace:   "keycap",
		waitBuckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		holdBuckets: prometheus.ExponentialBuckets(.005, 4, 10),
	}
	for _, o := range opts {
		o(&c)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: c.namespace, Name: name, Help: help}, []string{"limit"})
	}
	o := &Observer{
		acquired: counter("slots_acquired_total", "Slots granted."),
		exceeded: counter("limit_exceeded_total", "Slots refused because the pool was full."),
		released: counter("slots_released_total", "Slots released."),
		lost:     counter("leases_lost_total", "Leases found gone on renewal; the pool may have admitted one more holder."),
		failures: counter("store_failures_total", "Store outages, counted at their first failure, by the limit that met it."),
		inUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: c.namespace, Name: "slots_in_use",
			Help: "Slots held by this process."}, []string{"limit"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: c.namespace, Name: "wait_seconds",
			Help: "Time spent waiting for a slot, by outcome.", Buckets: c.waitBuckets}, []string{"limit", "outcome"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: c.namespace, Name: "hold_seconds",
			Help: "Time a slot was held.", Buckets: c.holdBuckets}, []string{"limit"}),
		up: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: c.namespace, Name: "store_up",
			Help: "0 while the store is failing, else 1."}),
	}
	o.up.Set(1)
	for _, col := range []prometheus.Collector{o.acquired, o.exceeded, o.released, o.lost, o.failures, o.inUse, o.wait, o.hold, o.up} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func (o *Observer) series(name string) *series {
	if s, ok := o.byName.Load(name); ok {
		return s.(*series)
	}
	s := &series{
		acquired:    o.acquired.WithLabelValues(name),
		exceeded:    o.exceeded.WithLabelValues(name),
		released:    o.released.WithLabelValues(name),
		lost:        o.lost.WithLabelValues(name),
		failures:    o.failures.WithLabelValues(name),
		inUse:       o.inUse.WithLabelValues(name),
		waitOK:      o.wait.WithLabelValues(name, "acquired"),
		waitRefused: o.wait.WithLabelValues(name, "exceeded"),
		hold:        o.hold.WithLabelValues(name),
	}
	actual, _ := o.byName.LoadOrStore(name, s)
	return actual.(*series)
}

// Observe implements keycap.Observer.
func (o *Observer) Observe(e keycap.Event) {
	switch e.Kind {
	case keycap.StoreRecovered:
		o.up.Set(1)
		return
	case keycap.StoreFailed:
		o.up.Set(0)
	}
	s := o.series(e.Limit.Name())
	switch e.Kind {
	case keycap.SlotAcquired:
		s.acquired.Inc()
		s.inUse.Inc()
		s.waitOK.Observe(e.Waited.Seconds())
	case keycap.LimitExceeded:
		s.exceeded.Inc()
		s.waitRefused.Observe(e.Waited.Seconds())
	case keycap.SlotReleased:
		s.released.Inc()
		s.inUse.Dec()
		s.hold.Observe(e.Held.Seconds())
	case keycap.LeaseLost:
		s.lost.Inc()
	case keycap.StoreFailed:
		s.failures.Inc()
	}
}
