package otelobserver

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/keycap/keycap"
)

const (
	// name is the instrumentation scope's name: OpenTelemetry recommends the
	// fully qualified Go package name.
	name = "github.com/keycap/keycap/otelobserver"

	// prefix begins the name of every instrument and span event.
	prefix = "keycap."
)

// The names of the span events ObserveContext adds to the Acquire's span.
const (
	EventSlotAcquired  = "keycap.slot_acquired"
	EventLimitExceeded = "keycap.limit_exceeded"
)

// maxCached bounds the attribute sets an Observer keeps, over all limits and
// APIs. Past it, an event builds its attributes on every call: it still
// counts, only slower.
const maxCached = 10_000

// Config configures an Observer. The zero Config is ready to use.
type Config struct {
	// DurationUnit selects the unit in which the duration histograms
	// (keycap.wait_duration, keycap.hold_duration,
	// keycap.store_outage_duration, keycap.api_pause_duration) are
	// recorded: "s" (seconds) or "ms" (milliseconds). Defaults to seconds.
	// Milliseconds keep their fraction (1.5 ms is 1.5, not 1). The span
	// events' waited_seconds is always in seconds.
	DurationUnit string

	// MeterProvider is the MeterProvider to create the instruments with.
	// May be left nil to use the global provider (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider

	// There is no TracerProvider, unlike otelriver's Config: the Observer
	// starts no spans of its own. ObserveContext adds its span events to
	// the span in the Acquire's context, whichever provider started it.
}

// Observer is a keycap.Observer and keycap.ContextObserver that records
// keycap's events as OpenTelemetry metrics, and refusals and grants as span
// events on the caller's span. It is safe for concurrent use.
type Observer struct {
	perUnit float64 // nanoseconds in the configured unit
	msUnit  float64 // milliseconds in the configured unit

	acquired, exceeded, released, lost, ghosts metric.Int64Counter
	inUse                                      metric.Int64UpDownCounter
	wait, hold                                 metric.Float64Histogram

	storeFailures, storeRecoveries, storeFailedCalls metric.Int64Counter
	overloaded                                       metric.Int64Counter
	storeUp                                          metric.Int64Gauge
	outage                                           metric.Float64Histogram

	throttled, exhausted, paused, held, retried metric.Int64Counter
	pauseLength                                 metric.Float64Histogram

	total                       metric.Int64Gauge
	totalLatency, totalBaseline metric.Float64Gauge
	totalInFlight               metric.Float64Gauge
	totalChanges                metric.Int64Counter

	slots     sync.Map // slotKey → *slotSeries
	apis      sync.Map // apiKey → *apiSeries
	cached    atomic.Int64
	maxCached int64 // maxCached; tests lower it
}

var (
	_ keycap.Observer        = (*Observer)(nil)
	_ keycap.ContextObserver = (*Observer)(nil)
)

// slotKey identifies the attribute set of a slot event. The key is not in
// it: keys are unbounded and may be personal data.
type slotKey struct {
	family keycap.Family
	name   string
	max    int
	shadow bool
}

// slotSeries holds the precomputed options of one slotKey, so that an event
// builds no attributes.
type slotSeries struct {
	add                 []metric.AddOption    // family, limit, max, shadow
	record              []metric.RecordOption // the same
	waitOK, waitRefused []metric.RecordOption // the same and outcome
	span                []attribute.KeyValue  // the same, for span events
}

// apiKey identifies the attribute set of a pause event: only the fields its
// kind reports are set.
type apiKey struct {
	kind   keycap.EventKind
	api    string
	status int
	source string
	paced  bool
}

type apiSeries struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// Bucket boundaries advised for the duration histograms, in milliseconds
// (a View overrides them). In seconds they are promobserver's: 1 ms to 10 s
// for waits, 5 ms to about 20 min for holds, 1 s to a day for pauses.
var (
	waitBuckets   = []float64{1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
	holdBuckets   = []float64{5, 20, 80, 320, 1280, 5120, 20480, 81920, 327680, 1310720}
	outageBuckets = []float64{100, 500, 1000, 5000, 10000, 30000, 60000, 300000, 900000, 3600000}
	pauseBuckets  = []float64{1000, 2000, 5000, 10000, 30000, 60000, 300000, 900000, 3600000, 86400000}
)

// New returns an Observer whose instruments are created by
// config.MeterProvider. config may be nil. It returns an error for a
// DurationUnit other than "s" or "ms", or when the provider refuses an
// instrument.
func New(config *Config) (*Observer, error) {
	if config == nil {
		config = &Config{}
	}
	unit := cmp.Or(config.DurationUnit, "s")
	o := &Observer{maxCached: maxCached}
	switch unit {
	case "s":
		o.perUnit, o.msUnit = float64(time.Second), 1000
	case "ms":
		o.perUnit, o.msUnit = float64(time.Millisecond), 1
	default:
		return nil, fmt.Errorf("otelobserver: duration unit %q: must be \"s\" or \"ms\"", config.DurationUnit)
	}
	provider := config.MeterProvider
	if provider == nil {
		provider = otel.GetMeterProvider()
	}
	meter := provider.Meter(name)

	var errs []error
	counter := func(n, desc, u string) metric.Int64Counter {
		c, err := meter.Int64Counter(prefix+n, metric.WithDescription(desc), metric.WithUnit(u))
		errs = append(errs, err)
		return c
	}
	histogram := func(n, desc string, buckets []float64) metric.Float64Histogram {
		b := make([]float64, len(buckets))
		for i, v := range buckets {
			b[i] = v / o.msUnit
		}
		h, err := meter.Float64Histogram(prefix+n, metric.WithDescription(desc), metric.WithUnit(unit),
			metric.WithExplicitBucketBoundaries(b...))
		errs = append(errs, err)
		return h
	}
	// Units follow OpenTelemetry's guidelines: annotations in braces for
	// counts, UCUM for durations.
	//
	// https://opentelemetry.io/docs/specs/semconv/general/metrics/#instrument-units
	o.acquired = counter("slot_acquired_count", "Slots granted", "{slot}")
	o.exceeded = counter("limit_exceeded_count", "Slots refused because the pool was full", "{slot}")
	o.released = counter("slot_released_count", "Slots released", "{slot}")
	o.lost = counter("lease_lost_count", "Leases found gone on renewal; the pool may have admitted one more holder", "{lease}")
	o.ghosts = counter("ghosts_dropped_count", "Members the node's heartbeat dropped: releases that never reached the store", "{member}")
	inUse, err := meter.Int64UpDownCounter(prefix+"slots_in_use", metric.WithDescription("Slots held by this process"), metric.WithUnit("{slot}"))
	errs = append(errs, err)
	o.inUse = inUse
	o.wait = histogram("wait_duration", "Time spent waiting for a slot, by outcome (acquired or exceeded)", waitBuckets)
	o.hold = histogram("hold_duration", "Time a slot was held, recorded on release", holdBuckets)

	o.storeFailures = counter("store_failure_count", "Store outages, counted at their first failure, by store partition", "{outage}")
	o.storeRecoveries = counter("store_recovery_count", "Store outages ended, by store partition", "{outage}")
	o.storeFailedCalls = counter("store_failed_call_count", "Failed store calls of the outages that ended, counted at recovery", "{call}")
	up, err := meter.Int64Gauge(prefix+"store_up", metric.WithDescription("0 during an outage of the store partition, else 1"), metric.WithUnit("1"))
	errs = append(errs, err)
	o.storeUp = up
	o.overloaded = counter("process_overloaded_count", "Store calls that ran out of their decision budget in this process (CPU starvation), not in the store, by store partition", "{call}")
	o.outage = histogram("store_outage_duration", "How long store outages lasted, recorded at recovery", outageBuckets)

	o.throttled = counter("api_throttled_count", "Throttled responses, by API, status and source of the wait", "{response}")
	o.exhausted = counter("api_exhausted_count", "Responses that said nothing remains until a reset", "{response}")
	o.paused = counter("api_paused_count", "Pauses started or extended", "{pause}")
	o.held = counter("api_held_count", "Calls refused unsent or jobs released, because the API was paused or over its rate (paced)", "{call}")
	o.retried = counter("api_retried_count", "Throttled requests sent again after a wait in place", "{call}")
	o.pauseLength = histogram("api_pause_duration", "How long pauses last", pauseBuckets)

	o.total, err = meter.Int64Gauge(prefix+"parent_total", metric.WithDescription("The adaptive total of a parent this process follows (enforced, or computed in shadow)"), metric.WithUnit("{slot}"))
	errs = append(errs, err)
	fgauge := func(n, desc, u string) metric.Float64Gauge {
		g, err := meter.Float64Gauge(prefix+n, metric.WithDescription(desc), metric.WithUnit(u))
		errs = append(errs, err)
		return g
	}
	o.totalLatency = fgauge("parent_latency", "Mean latency of the work an adaptive parent guards, over the interval of its last change, on every process", unit)
	o.totalBaseline = fgauge("parent_baseline", "The no-load latency an adaptive parent compares with, as of its last change", unit)
	o.totalInFlight = fgauge("parent_in_flight", "Average slots an adaptive parent's keys held, over the interval of its last change, on every process", "{slot}")
	o.totalChanges = counter("parent_total_change_count", "Changes of an adaptive total, by reason (demand, latency, overload)", "{change}")

	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("otelobserver: %w", err)
		}
	}
	// A store of one partition is up until it fails, as promobserver's
	// keycap_store_up{node=""} is.
	o.storeUp.Record(context.Background(), 1, metric.WithAttributes(attribute.String("node", "")))
	return o, nil
}

// Observe implements keycap.Observer.
func (o *Observer) Observe(e keycap.Event) { o.observe(context.Background(), e) }

// ObserveContext implements keycap.ContextObserver: the Limiter calls it for
// SlotAcquired and LimitExceeded with the Acquire's context. It records the
// metrics with ctx (so that exemplars can link to the trace) and, when the
// span in ctx is recording, adds a span event to it: keycap.slot_acquired or
// keycap.limit_exceeded. A refusal is a result, not an error: it does not
// set the span's status.
func (o *Observer) ObserveContext(ctx context.Context, e keycap.Event) {
	if ctx == nil {
		ctx = context.Background()
	}
	s := o.observe(ctx, e)
	if s == nil {
		return
	}
	var event string
	switch e.Kind {
	case keycap.SlotAcquired:
		event = EventSlotAcquired
	case keycap.LimitExceeded:
		event = EventLimitExceeded
	default:
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	n := len(s.span)
	span.AddEvent(event, trace.WithAttributes(append(s.span[:n:n], attribute.Float64("waited_seconds", e.Waited.Seconds()))...))
}

// observe records e's metrics. It returns the series of a slot event, nil
// for the others.
func (o *Observer) observe(ctx context.Context, e keycap.Event) *slotSeries {
	switch e.Kind {
	case keycap.SlotAcquired:
		s := o.slot(e.Limit)
		o.acquired.Add(ctx, 1, s.add...)
		o.inUse.Add(ctx, 1, s.add...)
		o.wait.Record(ctx, o.duration(e.Waited), s.waitOK...)
		return s
	case keycap.LimitExceeded:
		s := o.slot(e.Limit)
		o.exceeded.Add(ctx, 1, s.add...)
		o.wait.Record(ctx, o.duration(e.Waited), s.waitRefused...)
		return s
	case keycap.SlotReleased:
		s := o.slot(e.Limit)
		o.released.Add(ctx, 1, s.add...)
		o.inUse.Add(ctx, -1, s.add...)
		o.hold.Record(ctx, o.duration(e.Held), s.record...)
		return s
	case keycap.LeaseLost:
		s := o.slot(e.Limit)
		o.lost.Add(ctx, 1, s.add...)
		return s
	case keycap.GhostsDropped:
		s := o.slot(e.Limit)
		o.ghosts.Add(ctx, int64(e.Count), s.add...)
		return s

	case keycap.StoreFailed:
		node := metric.WithAttributes(attribute.String("node", e.Node))
		o.storeFailures.Add(ctx, 1, node)
		o.storeUp.Record(ctx, 0, node)
	case keycap.StoreRecovered:
		node := metric.WithAttributes(attribute.String("node", e.Node))
		o.storeRecoveries.Add(ctx, 1, node)
		o.storeFailedCalls.Add(ctx, e.Failures, node)
		o.storeUp.Record(ctx, 1, node)
		o.outage.Record(ctx, o.duration(e.Held), node)
	case keycap.ProcessOverloaded:
		o.overloaded.Add(ctx, 1, metric.WithAttributes(attribute.String("node", e.Node)))

	case keycap.Throttled:
		o.throttled.Add(ctx, 1, o.api(apiKey{kind: e.Kind, api: e.API, status: e.Status, source: e.Source}).add...)
	case keycap.Exhausted:
		o.exhausted.Add(ctx, 1, o.api(apiKey{kind: e.Kind, api: e.API, source: e.Source}).add...)
	case keycap.Paused:
		s := o.api(apiKey{kind: e.Kind, api: e.API})
		o.paused.Add(ctx, 1, s.add...)
		o.pauseLength.Record(ctx, o.duration(e.Wait), s.record...)
	case keycap.CallHeld:
		o.held.Add(ctx, 1, o.api(apiKey{kind: e.Kind, api: e.API, paced: e.Paced}).add...)
	case keycap.CallRetried:
		o.retried.Add(ctx, 1, o.api(apiKey{kind: e.Kind, api: e.API}).add...)

	case keycap.TotalChanged:
		if t := e.Tuning; t != nil {
			set := metric.WithAttributes(attribute.String("parent", t.Parent), attribute.Bool("shadow", t.Shadow))
			o.total.Record(ctx, int64(t.Total), set)
			o.totalLatency.Record(ctx, o.duration(t.Mean), set)
			o.totalBaseline.Record(ctx, o.duration(t.Baseline), set)
			o.totalInFlight.Record(ctx, t.InFlight, set)
			o.totalChanges.Add(ctx, 1, metric.WithAttributes(attribute.String("parent", t.Parent), attribute.Bool("shadow", t.Shadow),
				attribute.String("reason", t.Reason)))
		}
	}
	return nil
}

// duration returns d in the configured unit.
func (o *Observer) duration(d time.Duration) float64 { return float64(d) / o.perUnit }

// slot returns the options of lim's attribute set: cached, unless the cache
// is full.
func (o *Observer) slot(lim keycap.Limit) *slotSeries {
	return cachedSeries(o, &o.slots, slotKey{lim.Family(), lim.Name(), lim.Max(), lim.Shadow()}, newSlotSeries)
}

// cachedSeries returns the series of k from cache, building it with build
// and keeping it while the cache has room (o.maxCached over every cache).
func cachedSeries[K comparable, S any](o *Observer, cache *sync.Map, k K, build func(K) *S) *S {
	if s, ok := cache.Load(k); ok {
		return s.(*S)
	}
	s := build(k)
	if !o.reserve() {
		return s
	}
	actual, loaded := cache.LoadOrStore(k, s)
	if loaded {
		o.cached.Add(-1)
	}
	return actual.(*S)
}

func newSlotSeries(k slotKey) *slotSeries {
	kv := []attribute.KeyValue{
		attribute.String("family", k.family.String()),
		attribute.String("limit", k.name),
		attribute.Int("max", k.max),
		attribute.Bool("shadow", k.shadow),
	}
	set := metric.WithAttributeSet(attribute.NewSet(kv...))
	ok := metric.WithAttributeSet(attribute.NewSet(append(kv[:len(kv):len(kv)], attribute.String("outcome", "acquired"))...))
	refused := metric.WithAttributeSet(attribute.NewSet(append(kv[:len(kv):len(kv)], attribute.String("outcome", "exceeded"))...))
	return &slotSeries{
		add:         []metric.AddOption{set},
		record:      []metric.RecordOption{set},
		waitOK:      []metric.RecordOption{ok},
		waitRefused: []metric.RecordOption{refused},
		span:        kv,
	}
}

// api returns the options of a pause event's attribute set.
func (o *Observer) api(k apiKey) *apiSeries { return cachedSeries(o, &o.apis, k, newAPISeries) }

func newAPISeries(k apiKey) *apiSeries {
	kv := []attribute.KeyValue{attribute.String("api", k.api)}
	switch k.kind {
	case keycap.Throttled:
		kv = append(kv, attribute.Int("status", k.status), attribute.String("source", k.source))
	case keycap.Exhausted:
		kv = append(kv, attribute.String("source", k.source))
	case keycap.CallHeld:
		kv = append(kv, attribute.Bool("paced", k.paced))
	}
	set := metric.WithAttributeSet(attribute.NewSet(kv...))
	return &apiSeries{add: []metric.AddOption{set}, record: []metric.RecordOption{set}}
}

// reserve takes a place in the cache, and reports whether there was one.
func (o *Observer) reserve() bool {
	if o.cached.Add(1) > o.maxCached {
		o.cached.Add(-1)
		return false
	}
	return true
}
