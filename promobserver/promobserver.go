// Package promobserver exports keycap's events as Prometheus metrics: one
// keycap.Observer for every front door — HTTP requests, jobs, connections
// and API pauses — to pass to keycap.WithObserver.
//
//	obs, err := promobserver.New(prometheus.DefaultRegisterer)
//	limiter, err := keycap.NewLimiter(store, keycap.WithObserver(obs))
//
// Slot metrics are labelled by family ("app" for HTTP and the application's
// own limits, "job", "conn"), limit name and shadow ("true" for a shadow
// limit's decisions, keycap.Spec.Shadow: its refusals are what the cap would
// have refused), never by key: keys are unbounded (users, IPs, tenants) and
// would explode the number of series. Limit names come from code (limiter
// names, job kinds, Pusher apps), so they are few.
//
//	keycap_slots_acquired_total{family,limit,shadow}     slots granted (connections admitted)
//	keycap_limit_exceeded_total{family,limit,shadow}     refusals
//	keycap_slots_released_total{family,limit,shadow}     slots released (connections gone)
//	keycap_slots_in_use{family,limit,shadow}             acquired minus released, in this process
//	keycap_leases_lost_total{family,limit,shadow}        leases found gone on renewal
//	keycap_ghosts_dropped_total{family,limit,shadow}     members the heartbeat dropped as ghosts
//	keycap_wait_seconds{family,limit,shadow,outcome}     time spent waiting: outcome "acquired" or "exceeded"
//	keycap_hold_seconds{family,limit,shadow}             time a slot was held, on release
//	keycap_store_failures_total{node}             store outages, counted at their first failure
//	keycap_store_up{node}                         0 during an outage of that store partition, else 1
//	keycap_process_overloaded_total{node}         store calls that ran out of their decision budget in
//	                                              this process (CPU starvation), not in the store
//
// API pauses are labelled by API name: keep those to a bounded set (hosts,
// vendors), not one per user.
//
//	keycap_api_throttled_total{api,status}        throttled responses
//	keycap_api_exhausted_total{api}               responses that said nothing remains
//	keycap_api_pauses_total{api}                  pauses started or extended
//	keycap_api_pause_seconds{api}                 how long each pause lasts
//	keycap_api_held_total{api,reason}             calls refused or jobs released: "paused" or "paced"
//	keycap_api_retries_in_place_total{api}        throttled requests sent again after a wait in place
package promobserver

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keycap/keycap"
)

// Observer is a keycap.Observer that updates Prometheus metrics.
type Observer struct {
	acquired, exceeded, released, lost, ghosts *prometheus.CounterVec
	inUse                                      *prometheus.GaugeVec
	wait, hold                                 *prometheus.HistogramVec
	failures, overloaded                       *prometheus.CounterVec
	up                                         *prometheus.GaugeVec

	throttled, exhausted, pauses, held, retries *prometheus.CounterVec
	pauseLength                                 *prometheus.HistogramVec

	total, totalLatency, totalBaseline, totalInFlight *prometheus.GaugeVec
	totalChanges                                      *prometheus.CounterVec

	suffix func(keycap.Limit) string // WithLimitSuffix, nil without

	byLimit sync.Map // seriesKey → *series
}

type seriesKey struct {
	family keycap.Family
	name   string
	suffix string
	shadow bool
}

// series caches the children of one limit, so that an event costs no label
// lookup.
type series struct {
	acquired, exceeded, released, lost, ghosts prometheus.Counter
	inUse                                      prometheus.Gauge
	waitOK, waitRefused, hold                  prometheus.Observer
}

// An Option configures an Observer.
type Option struct{ apply func(*config) }

type config struct {
	suffix       func(keycap.Limit) string
	namespace    string
	waitBuckets  []float64
	holdBuckets  []float64
	pauseBuckets []float64
}

// WithLimitSuffix tells apart, in the limit label, limits that share a
// name: the label is the limit's name, then a space and what suffix returns
// for the limit, when that is not empty. The gateway gives a route's limits
// their key's source ("reports header:X-User", "reports ip"). suffix runs
// on every event: it should return a part of the limit's own strings (no
// allocation) and take few values, never a key's value, which would make a
// series per key.
func WithLimitSuffix(suffix func(keycap.Limit) string) Option {
	return Option{func(c *config) { c.suffix = suffix }}
}

// WithNamespace replaces the metrics' "keycap" prefix.
func WithNamespace(ns string) Option { return Option{func(c *config) { c.namespace = ns }} }

// WithWaitBuckets sets the buckets of keycap_wait_seconds (default: 1 ms to
// 10 s).
func WithWaitBuckets(b []float64) Option { return Option{func(c *config) { c.waitBuckets = b }} }

// WithHoldBuckets sets the buckets of keycap_hold_seconds (default: 5 ms to
// about 20 min).
func WithHoldBuckets(b []float64) Option { return Option{func(c *config) { c.holdBuckets = b }} }

// WithPauseBuckets sets the buckets of keycap_api_pause_seconds (default: 1 s
// to a day).
func WithPauseBuckets(b []float64) Option { return Option{func(c *config) { c.pauseBuckets = b }} }

// New returns an Observer whose metrics are registered with reg.
func New(reg prometheus.Registerer, opts ...Option) (*Observer, error) {
	c := config{
		namespace:    "keycap",
		waitBuckets:  []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		holdBuckets:  prometheus.ExponentialBuckets(.005, 4, 10),
		pauseBuckets: []float64{1, 2, 5, 10, 30, 60, 300, 900, 3600, 86400},
	}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: c.namespace, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: c.namespace, Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: c.namespace, Name: name, Help: help, Buckets: buckets}, labels)
	}
	o := &Observer{
		suffix:   c.suffix,
		acquired: counter("slots_acquired_total", "Slots granted.", "family", "limit", "shadow"),
		exceeded: counter("limit_exceeded_total", "Slots refused because the pool was full.", "family", "limit", "shadow"),
		released: counter("slots_released_total", "Slots released.", "family", "limit", "shadow"),
		lost:     counter("leases_lost_total", "Leases found gone on renewal; the pool may have admitted one more holder.", "family", "limit", "shadow"),
		ghosts:   counter("ghosts_dropped_total", "Members the node's heartbeat dropped: releases that never reached the store.", "family", "limit", "shadow"),
		inUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: c.namespace, Name: "slots_in_use",
			Help: "Slots held by this process."}, []string{"family", "limit", "shadow"}),
		wait:     histogram("wait_seconds", "Time spent waiting for a slot, by outcome.", c.waitBuckets, "family", "limit", "shadow", "outcome"),
		hold:     histogram("hold_seconds", "Time a slot was held.", c.holdBuckets, "family", "limit", "shadow"),
		failures: counter("store_failures_total", "Store outages, counted at their first failure, by store partition.", "node"),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: c.namespace, Name: "store_up",
			Help: "0 during an outage of the store partition, else 1."}, []string{"node"}),
		overloaded:  counter("process_overloaded_total", "Store calls that ran out of their decision budget in this process (CPU starvation), not in the store, by store partition.", "node"),
		throttled:   counter("api_throttled_total", "Throttled responses, by API and status.", "api", "status"),
		exhausted:   counter("api_exhausted_total", "Responses that said nothing remains until a reset.", "api"),
		pauses:      counter("api_pauses_total", "Pauses started or extended.", "api"),
		held:        counter("api_held_total", "Calls refused unsent or jobs released, because the API was paused or over its rate.", "api", "reason"),
		retries:     counter("api_retries_in_place_total", "Throttled requests sent again after a wait in place.", "api"),
		pauseLength: histogram("api_pause_seconds", "How long pauses last.", c.pauseBuckets, "api"),
		total:       gauge("parent_total", "The adaptive total of a parent this process follows (enforced, or computed in shadow).", "parent", "shadow"),
		totalLatency: gauge("parent_latency_seconds", "Mean latency of the work an adaptive parent guards, over the interval of its last change, on every process.",
			"parent", "shadow"),
		totalBaseline: gauge("parent_baseline_seconds", "The no-load latency an adaptive parent compares with, as of its last change.", "parent", "shadow"),
		totalInFlight: gauge("parent_in_flight", "Average slots an adaptive parent's keys held, over the interval of its last change, on every process.",
			"parent", "shadow"),
		totalChanges: counter("parent_total_changes_total", "Changes of an adaptive total, by reason (demand, latency, overload).", "parent", "shadow", "reason"),
	}
	o.up.WithLabelValues("").Set(1)
	for _, col := range []prometheus.Collector{o.acquired, o.exceeded, o.released, o.lost, o.ghosts, o.inUse, o.wait, o.hold,
		o.failures, o.up, o.overloaded, o.throttled, o.exhausted, o.pauses, o.held, o.retries, o.pauseLength,
		o.total, o.totalLatency, o.totalBaseline, o.totalInFlight, o.totalChanges} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func (o *Observer) series(lim keycap.Limit) *series {
	k := seriesKey{family: lim.Family(), name: lim.Name(), shadow: lim.Shadow()}
	if o.suffix != nil {
		k.suffix = o.suffix(lim)
	}
	if s, ok := o.byLimit.Load(k); ok {
		return s.(*series)
	}
	f, n, sh := k.family.String(), k.name, strconv.FormatBool(k.shadow)
	if k.suffix != "" {
		n += " " + k.suffix
	}
	s := &series{
		acquired:    o.acquired.WithLabelValues(f, n, sh),
		exceeded:    o.exceeded.WithLabelValues(f, n, sh),
		released:    o.released.WithLabelValues(f, n, sh),
		lost:        o.lost.WithLabelValues(f, n, sh),
		ghosts:      o.ghosts.WithLabelValues(f, n, sh),
		inUse:       o.inUse.WithLabelValues(f, n, sh),
		waitOK:      o.wait.WithLabelValues(f, n, sh, "acquired"),
		waitRefused: o.wait.WithLabelValues(f, n, sh, "exceeded"),
		hold:        o.hold.WithLabelValues(f, n, sh),
	}
	actual, _ := o.byLimit.LoadOrStore(k, s)
	return actual.(*series)
}

// Observe implements keycap.Observer.
func (o *Observer) Observe(e keycap.Event) {
	switch e.Kind {
	case keycap.StoreFailed:
		o.failures.WithLabelValues(e.Node).Inc()
		o.up.WithLabelValues(e.Node).Set(0)
	case keycap.StoreRecovered:
		o.up.WithLabelValues(e.Node).Set(1)
	case keycap.ProcessOverloaded:
		o.overloaded.WithLabelValues(e.Node).Inc()
	case keycap.SlotAcquired:
		s := o.series(e.Limit)
		s.acquired.Inc()
		s.inUse.Inc()
		s.waitOK.Observe(e.Waited.Seconds())
	case keycap.LimitExceeded:
		s := o.series(e.Limit)
		s.exceeded.Inc()
		s.waitRefused.Observe(e.Waited.Seconds())
	case keycap.SlotReleased:
		s := o.series(e.Limit)
		s.released.Inc()
		s.inUse.Dec()
		s.hold.Observe(e.Held.Seconds())
	case keycap.LeaseLost:
		o.series(e.Limit).lost.Inc()
	case keycap.GhostsDropped:
		o.series(e.Limit).ghosts.Add(float64(e.Count))
	case keycap.Throttled:
		o.throttled.WithLabelValues(e.API, strconv.Itoa(e.Status)).Inc()
	case keycap.Exhausted:
		o.exhausted.WithLabelValues(e.API).Inc()
	case keycap.Paused:
		o.pauses.WithLabelValues(e.API).Inc()
		o.pauseLength.WithLabelValues(e.API).Observe(e.Wait.Seconds())
	case keycap.CallHeld:
		reason := "paused"
		if e.Paced {
			reason = "paced"
		}
		o.held.WithLabelValues(e.API, reason).Inc()
	case keycap.CallRetried:
		o.retries.WithLabelValues(e.API).Inc()
	case keycap.TotalChanged:
		if t := e.Tuning; t != nil {
			p, sh := t.Parent, strconv.FormatBool(t.Shadow)
			o.total.WithLabelValues(p, sh).Set(float64(t.Total))
			o.totalLatency.WithLabelValues(p, sh).Set(t.Mean.Seconds())
			o.totalBaseline.WithLabelValues(p, sh).Set(t.Baseline.Seconds())
			o.totalInFlight.WithLabelValues(p, sh).Set(t.InFlight)
			o.totalChanges.WithLabelValues(p, sh, t.Reason).Inc()
		}
	}
}
