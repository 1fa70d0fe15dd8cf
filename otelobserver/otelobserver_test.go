package otelobserver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/otelobserver"
)

const secret = "user:secret-42@example.com" // a key, which must appear nowhere

var (
	exports = keycap.Spec{Name: "exports", Max: 3}.For(secret)
	sends   = keycap.Spec{Name: "send", Max: 2, Family: keycap.FamilyJob}.For(secret)
	shadow  = keycap.Spec{Name: "exports", Max: 1, Shadow: true}.For(secret)
)

func TestSlotEvents(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otelobserver.Config{})
	for _, e := range []keycap.Event{
		{Kind: keycap.SlotAcquired, Limit: exports, Waited: 250 * time.Millisecond},
		{Kind: keycap.SlotAcquired, Limit: exports, Waited: 250 * time.Millisecond},
		{Kind: keycap.LimitExceeded, Limit: exports, Waited: time.Second},
		{Kind: keycap.SlotReleased, Limit: exports, Held: 2 * time.Second},
		{Kind: keycap.LeaseLost, Limit: exports, Held: 3 * time.Second},
		{Kind: keycap.GhostsDropped, Limit: exports, Count: 4},
		{Kind: keycap.SlotAcquired, Limit: sends},
		{Kind: keycap.LimitExceeded, Limit: shadow, Waited: 0},
	} {
		obs.Observe(e)
	}
	ms := collect(t, reader)

	for name, want := range map[string]int64{
		"keycap.slot_acquired_count":  2,
		"keycap.limit_exceeded_count": 1,
		"keycap.slot_released_count":  1,
		"keycap.slots_in_use":         1,
		"keycap.lease_lost_count":     1,
		"keycap.ghosts_dropped_count": 4,
	} {
		if got := ms.sum(t, name, slotAttrs(exports)...); got != want {
			t.Errorf("%s{exports} = %d, want %d", name, got, want)
		}
	}
	if got := ms.sum(t, "keycap.slot_acquired_count", slotAttrs(sends)...); got != 1 {
		t.Errorf("acquired{send} = %d, want 1", got)
	}
	if got := ms.sum(t, "keycap.slots_in_use", slotAttrs(sends)...); got != 1 {
		t.Errorf("in use{send} = %d, want 1", got)
	}
	if got := ms.sum(t, "keycap.limit_exceeded_count", slotAttrs(shadow)...); got != 1 {
		t.Errorf("exceeded{shadow} = %d, want 1", got)
	}
	// No stray series: exports and send were acquired, exports and its
	// shadow refused, and only exports released.
	for name, want := range map[string]int{
		"keycap.slot_acquired_count": 2, "keycap.limit_exceeded_count": 2, "keycap.slot_released_count": 1,
		"keycap.slots_in_use": 2, "keycap.lease_lost_count": 1, "keycap.ghosts_dropped_count": 1,
		"keycap.wait_duration": 4, "keycap.hold_duration": 1,
	} {
		if got := ms.points(t, name); got != want {
			t.Errorf("%s has %d points, want %d", name, got, want)
		}
	}

	ok := ms.hist(t, "keycap.wait_duration", slotAttrs(exports, attribute.String("outcome", "acquired"))...)
	if ok.Count != 2 || !near(ok.Sum, 0.5) {
		t.Errorf("wait{exports,acquired}: %d waits, %v s; want 2, 0.5 s", ok.Count, ok.Sum)
	}
	refused := ms.hist(t, "keycap.wait_duration", slotAttrs(exports, attribute.String("outcome", "exceeded"))...)
	if refused.Count != 1 || !near(refused.Sum, 1) {
		t.Errorf("wait{exports,exceeded}: %d waits, %v s; want 1, 1 s", refused.Count, refused.Sum)
	}
	hold := ms.hist(t, "keycap.hold_duration", slotAttrs(exports)...)
	if hold.Count != 1 || !near(hold.Sum, 2) {
		t.Errorf("hold{exports}: %d holds, %v s; want 1, 2 s", hold.Count, hold.Sum)
	}
	if ok.Bounds[0] != 0.001 || ok.Bounds[len(ok.Bounds)-1] != 10 {
		t.Errorf("wait buckets %v, want 1 ms to 10 s", ok.Bounds)
	}
	checkInstruments(t, ms)
}

// checkInstruments checks the kind and unit of every instrument collected.
func checkInstruments(t *testing.T, ms metrics) {
	t.Helper()
	type kind struct {
		unit      string
		monotonic bool // sums only
	}
	want := map[string]kind{
		"keycap.slot_acquired_count":      {"{slot}", true},
		"keycap.limit_exceeded_count":     {"{slot}", true},
		"keycap.slot_released_count":      {"{slot}", true},
		"keycap.slots_in_use":             {"{slot}", false},
		"keycap.lease_lost_count":         {"{lease}", true},
		"keycap.ghosts_dropped_count":     {"{member}", true},
		"keycap.wait_duration":            {"s", false},
		"keycap.hold_duration":            {"s", false},
		"keycap.store_failure_count":      {"{outage}", true},
		"keycap.store_recovery_count":     {"{outage}", true},
		"keycap.store_failed_call_count":  {"{call}", true},
		"keycap.store_outage_duration":    {"s", false},
		"keycap.store_up":                 {"1", false},
		"keycap.process_overloaded_count": {"{call}", true},
		"keycap.api_throttled_count":      {"{response}", true},
		"keycap.api_exhausted_count":      {"{response}", true},
		"keycap.api_paused_count":         {"{pause}", true},
		"keycap.api_pause_duration":       {"s", false},
		"keycap.api_held_count":           {"{call}", true},
		"keycap.api_retried_count":        {"{call}", true},
	}
	for name, m := range ms {
		w, ok := want[name]
		if !ok {
			t.Errorf("undocumented instrument %s", name)
			continue
		}
		if m.Unit != w.unit {
			t.Errorf("%s: unit %q, want %q", name, m.Unit, w.unit)
		}
		if m.Description == "" {
			t.Errorf("%s has no description", name)
		}
		if s, ok := m.Data.(metricdata.Sum[int64]); ok && s.IsMonotonic != w.monotonic {
			t.Errorf("%s: monotonic %v, want %v", name, s.IsMonotonic, w.monotonic)
		}
	}
}

func TestStoreEvents(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otelobserver.Config{})
	node := func(n string) attribute.KeyValue { return attribute.String("node", n) }
	if up := collect(t, reader).gauge(t, "keycap.store_up", node("")); up != 1 {
		t.Fatalf("store_up{node=\"\"} = %d before any event, want 1", up)
	}
	down := errors.New("down")
	obs.Observe(keycap.Event{Kind: keycap.StoreFailed, Limit: exports, Err: down})
	obs.Observe(keycap.Event{Kind: keycap.StoreFailed, Limit: exports, Node: "redis-1", Err: down})
	obs.Observe(keycap.Event{Kind: keycap.StoreRecovered, Node: "redis-1", Held: 90 * time.Second, Failures: 7})
	obs.Observe(keycap.Event{Kind: keycap.ProcessOverloaded, Limit: exports, Node: "redis-2", Err: down})
	ms := collect(t, reader)
	for _, c := range []struct {
		name, node string
		want       int64
	}{
		{"keycap.store_failure_count", "", 1},
		{"keycap.store_failure_count", "redis-1", 1},
		{"keycap.store_recovery_count", "redis-1", 1},
		{"keycap.store_failed_call_count", "redis-1", 7},
		{"keycap.process_overloaded_count", "redis-2", 1},
	} {
		if got := ms.sum(t, c.name, node(c.node)); got != c.want {
			t.Errorf("%s{node=%q} = %d, want %d", c.name, c.node, got, c.want)
		}
	}
	if n := ms.points(t, "keycap.store_recovery_count"); n != 1 {
		t.Errorf("recoveries at %d nodes, want 1", n)
	}
	if up := ms.gauge(t, "keycap.store_up", node("")); up != 0 {
		t.Errorf("store_up{node=\"\"} = %d during its outage, want 0", up)
	}
	if n := ms.points(t, "keycap.store_failure_count"); n != 2 {
		t.Errorf("outages at %d nodes, want 2: a call lost in the process is none", n)
	}
	if up := ms.gauge(t, "keycap.store_up", node("redis-1")); up != 1 {
		t.Errorf("store_up{node=redis-1} = %d after its recovery, want 1", up)
	}
	if h := ms.hist(t, "keycap.store_outage_duration", node("redis-1")); h.Count != 1 || !near(h.Sum, 90) {
		t.Errorf("outage: %d outages, %v s; want 1, 90 s", h.Count, h.Sum)
	}
	checkInstruments(t, ms)
}

func TestPauseEvents(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otelobserver.Config{})
	for _, e := range []keycap.Event{
		{Kind: keycap.Throttled, Family: keycap.FamilyPause, API: "vendor", Status: 429, Wait: time.Minute, Source: "Retry-After"},
		{Kind: keycap.Throttled, Family: keycap.FamilyPause, API: "vendor", Status: 429, Wait: time.Second, Source: "Retry-After"},
		{Kind: keycap.Throttled, Family: keycap.FamilyPause, API: "vendor", Status: 503, Wait: time.Minute, Source: "X-Ratelimit-Reset"},
		{Kind: keycap.Exhausted, Family: keycap.FamilyPause, API: "vendor", Wait: time.Minute, Source: "X-Ratelimit-Reset"},
		{Kind: keycap.Paused, Family: keycap.FamilyPause, API: "vendor", Wait: time.Minute},
		{Kind: keycap.Paused, Family: keycap.FamilyPause, API: "vendor", Wait: 30 * time.Second},
		{Kind: keycap.CallHeld, Family: keycap.FamilyPause, API: "vendor", Wait: time.Second},
		{Kind: keycap.CallHeld, Family: keycap.FamilyPause, API: "vendor", Wait: 2 * time.Second},
		{Kind: keycap.CallHeld, Family: keycap.FamilyPause, API: "vendor", Paced: true},
		{Kind: keycap.CallRetried, Family: keycap.FamilyPause, API: "other", Wait: time.Second},
	} {
		obs.Observe(e)
	}
	ms := collect(t, reader)
	api := attribute.String("api", "vendor")
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  int64
	}{
		{"keycap.api_throttled_count", []attribute.KeyValue{api, attribute.Int("status", 429), attribute.String("source", "Retry-After")}, 2},
		{"keycap.api_throttled_count", []attribute.KeyValue{api, attribute.Int("status", 503), attribute.String("source", "X-Ratelimit-Reset")}, 1},
		{"keycap.api_exhausted_count", []attribute.KeyValue{api, attribute.String("source", "X-Ratelimit-Reset")}, 1},
		{"keycap.api_paused_count", []attribute.KeyValue{api}, 2},
		{"keycap.api_held_count", []attribute.KeyValue{api, attribute.Bool("paced", false)}, 2},
		{"keycap.api_held_count", []attribute.KeyValue{api, attribute.Bool("paced", true)}, 1},
		{"keycap.api_retried_count", []attribute.KeyValue{attribute.String("api", "other")}, 1},
	} {
		if got := ms.sum(t, c.name, c.attrs...); got != c.want {
			t.Errorf("%s%v = %d, want %d", c.name, c.attrs, got, c.want)
		}
	}
	for name, want := range map[string]int{"keycap.api_throttled_count": 2, "keycap.api_exhausted_count": 1,
		"keycap.api_paused_count": 1, "keycap.api_held_count": 2, "keycap.api_retried_count": 1} {
		if got := ms.points(t, name); got != want {
			t.Errorf("%s has %d points, want %d", name, got, want)
		}
	}
	if h := ms.hist(t, "keycap.api_pause_duration", api); h.Count != 2 || !near(h.Sum, 90) {
		t.Errorf("pauses: %d, %v s; want 2, 90 s", h.Count, h.Sum)
	}
	// No slot instrument saw a pause event.
	for _, name := range []string{"keycap.slot_acquired_count", "keycap.slots_in_use", "keycap.wait_duration"} {
		if _, ok := ms[name]; ok {
			t.Errorf("%s recorded from pause events", name)
		}
	}
	checkInstruments(t, ms)
}

func TestInUse(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otelobserver.Config{})
	inUse := func() int64 { return collect(t, reader).sum(t, "keycap.slots_in_use", slotAttrs(exports)...) }
	acquire := keycap.Event{Kind: keycap.SlotAcquired, Limit: exports}
	release := keycap.Event{Kind: keycap.SlotReleased, Limit: exports, Held: time.Millisecond}
	for want, e := range []keycap.Event{acquire, acquire, acquire} {
		obs.Observe(e)
		if got := inUse(); got != int64(want+1) {
			t.Fatalf("in use %d after %d acquired, want %d", got, want+1, want+1)
		}
	}
	obs.Observe(release)
	obs.Observe(release)
	if got := inUse(); got != 1 {
		t.Fatalf("in use %d after 3 acquired and 2 released, want 1", got)
	}
	// A refusal, a lost lease and ghosts move nothing: the lost lease is
	// still released later.
	obs.Observe(keycap.Event{Kind: keycap.LimitExceeded, Limit: exports})
	obs.Observe(keycap.Event{Kind: keycap.LeaseLost, Limit: exports})
	obs.Observe(keycap.Event{Kind: keycap.GhostsDropped, Limit: exports, Count: 2})
	if got := inUse(); got != 1 {
		t.Fatalf("in use %d after a refusal, a lost lease and ghosts, want 1", got)
	}
	obs.Observe(release)
	if got := inUse(); got != 0 {
		t.Fatalf("in use %d after every slot released, want 0", got)
	}

	// Concurrently, from many goroutines and limits at once.
	const workers, pairs = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		lim := keycap.Spec{Name: fmt.Sprintf("limit-%d", w%3), Max: 5}.For(secret)
		wg.Go(func() {
			for range pairs {
				obs.ObserveContext(context.Background(), keycap.Event{Kind: keycap.SlotAcquired, Limit: lim})
				obs.Observe(keycap.Event{Kind: keycap.SlotReleased, Limit: lim})
			}
		})
	}
	wg.Wait()
	ms := collect(t, reader)
	var acquired, released int64
	for l := range 3 {
		lim := keycap.Spec{Name: fmt.Sprintf("limit-%d", l), Max: 5}.For("")
		acquired += ms.sum(t, "keycap.slot_acquired_count", slotAttrs(lim)...)
		released += ms.sum(t, "keycap.slot_released_count", slotAttrs(lim)...)
		if n := ms.sum(t, "keycap.slots_in_use", slotAttrs(lim)...); n != 0 {
			t.Errorf("%s: %d in use after as many releases as grants", lim.Name(), n)
		}
	}
	if acquired != workers*pairs || released != workers*pairs {
		t.Errorf("%d acquired and %d released, want %d each", acquired, released, workers*pairs)
	}
}

// TestNoKey: the key reaches no attribute of any instrument or span event,
// and slot instruments have exactly the documented attributes.
func TestNoKey(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otelobserver.Config{})
	rec := tracetest.NewSpanRecorder()
	ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test").Start(context.Background(), "request")
	for _, lim := range []keycap.Limit{exports, sends, shadow} {
		obs.ObserveContext(ctx, keycap.Event{Kind: keycap.SlotAcquired, Family: lim.Family(), Limit: lim})
		obs.ObserveContext(ctx, keycap.Event{Kind: keycap.LimitExceeded, Family: lim.Family(), Limit: lim})
		for _, k := range []keycap.EventKind{keycap.SlotReleased, keycap.LeaseLost, keycap.GhostsDropped} {
			obs.Observe(keycap.Event{Kind: k, Family: lim.Family(), Limit: lim, Count: 1})
		}
		obs.Observe(keycap.Event{Kind: keycap.StoreFailed, Family: lim.Family(), Limit: lim, Err: errors.New(secret)})
	}
	obs.Observe(keycap.Event{Kind: keycap.StoreRecovered, Held: time.Second})
	span.End()

	ms := collect(t, reader)
	if len(ms) < 10 {
		t.Fatalf("only %d instruments recorded", len(ms))
	}
	slotKeys := "family,limit,max,shadow"
	for name, m := range ms {
		for _, set := range pointSets(m) {
			var keys []string
			for _, kv := range set.ToSlice() {
				keys = append(keys, string(kv.Key))
				if strings.Contains(kv.Value.String(), "secret") {
					t.Errorf("%s has the key in %s=%s", name, kv.Key, kv.Value.String())
				}
			}
			got := strings.Join(keys, ",")
			switch {
			case strings.HasPrefix(name, "keycap.store_"):
				if got != "node" {
					t.Errorf("%s has attributes %s, want node", name, got)
				}
			case name == "keycap.wait_duration":
				if got != "family,limit,max,outcome,shadow" { // sorted
					t.Errorf("%s has attributes %s, want family,limit,max,outcome,shadow", name, got)
				}
			default:
				if got != slotKeys {
					t.Errorf("%s has attributes %s, want %s", name, got, slotKeys)
				}
			}
		}
	}
	events := rec.Ended()[0].Events()
	if len(events) != 6 {
		t.Fatalf("%d span events, want 6", len(events))
	}
	for _, ev := range events {
		for _, kv := range ev.Attributes {
			if strings.Contains(kv.Value.String(), "secret") {
				t.Errorf("span event %s has the key in %s", ev.Name, kv.Key)
			}
		}
	}
}

func TestSpanEvents(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otelobserver.Config{DurationUnit: "ms"}) // span events stay in seconds
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	ctx, span := tracer.Start(context.Background(), "request")
	obs.ObserveContext(ctx, keycap.Event{Kind: keycap.SlotAcquired, Limit: exports, Waited: 250 * time.Millisecond})
	obs.ObserveContext(ctx, keycap.Event{Kind: keycap.LimitExceeded, Limit: shadow, Waited: 1500 * time.Millisecond})
	obs.ObserveContext(ctx, keycap.Event{Kind: keycap.SlotReleased, Limit: exports}) // not an Acquire's: no event
	obs.Observe(keycap.Event{Kind: keycap.SlotAcquired, Limit: exports})             // no context: no event
	span.End()

	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	if st := ended[0].Status(); st.Code != codes.Unset {
		t.Errorf("span status %v %q: a refusal must leave it alone", st.Code, st.Description)
	}
	type event struct {
		name  string
		attrs string
	}
	var got []event
	for _, ev := range ended[0].Events() {
		set := attribute.NewSet(ev.Attributes...)
		got = append(got, event{ev.Name, set.Encoded(attribute.DefaultEncoder())})
	}
	want := []event{
		{"keycap.slot_acquired", "family=app,limit=exports,max=3,shadow=false,waited_seconds=0.25"},
		{"keycap.limit_exceeded", "family=app,limit=exports,max=1,shadow=true,waited_seconds=1.5"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("span events\n%v\nwant\n%v", got, want)
	}
	// The metrics were recorded as well, in milliseconds.
	ms := collect(t, reader)
	if n := ms.sum(t, "keycap.slot_acquired_count", slotAttrs(exports)...); n != 2 {
		t.Errorf("acquired %d, want 2", n)
	}
	if h := ms.hist(t, "keycap.wait_duration", slotAttrs(shadow, attribute.String("outcome", "exceeded"))...); !near(h.Sum, 1500) {
		t.Errorf("wait of the refusal %v ms, want 1500", h.Sum)
	}
}

// fakeSpan records the events added to it, recording or not.
type fakeSpan struct {
	trace.Span // noop
	recording  bool
	events     []string
}

func (s *fakeSpan) IsRecording() bool { return s.recording }
func (s *fakeSpan) AddEvent(name string, _ ...trace.EventOption) {
	s.events = append(s.events, name)
}

func TestSpanEventsOnlyWhenRecording(t *testing.T) {
	t.Parallel()
	_, noopSpan := noop.NewTracerProvider().Tracer("test").Start(context.Background(), "x")
	obs, reader := newObserver(t, otelobserver.Config{})
	for _, recording := range []bool{false, true} {
		span := &fakeSpan{Span: noopSpan, recording: recording}
		ctx := trace.ContextWithSpan(context.Background(), span)
		obs.ObserveContext(ctx, keycap.Event{Kind: keycap.SlotAcquired, Limit: exports})
		obs.ObserveContext(ctx, keycap.Event{Kind: keycap.LimitExceeded, Limit: exports})
		want := 0
		if recording {
			want = 2
		}
		if len(span.events) != want {
			t.Errorf("recording %v: %d span events %v, want %d", recording, len(span.events), span.events, want)
		}
	}
	// A span the sampler dropped is not recording either: metrics only.
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())).Tracer("test")
	ctx, span := tracer.Start(context.Background(), "request")
	if span.IsRecording() {
		t.Fatal("a span the sampler dropped is recording")
	}
	obs.ObserveContext(ctx, keycap.Event{Kind: keycap.SlotAcquired, Limit: exports})
	span.End()
	if n := collect(t, reader).sum(t, "keycap.slot_acquired_count", slotAttrs(exports)...); n != 3 {
		t.Errorf("acquired %d with spans not recording, want 3", n)
	}
}

func TestDurationUnit(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otelobserver.Config{DurationUnit: "ms"})
	obs.Observe(keycap.Event{Kind: keycap.SlotAcquired, Limit: exports, Waited: 1500 * time.Microsecond})
	obs.Observe(keycap.Event{Kind: keycap.SlotReleased, Limit: exports, Held: 2 * time.Second})
	obs.Observe(keycap.Event{Kind: keycap.Paused, API: "vendor", Wait: time.Minute})
	obs.Observe(keycap.Event{Kind: keycap.StoreRecovered, Held: 3 * time.Second})
	ms := collect(t, reader)
	wait := ms.hist(t, "keycap.wait_duration", slotAttrs(exports, attribute.String("outcome", "acquired"))...)
	if !near(wait.Sum, 1.5) {
		t.Errorf("wait %v ms, want 1.5 (the fraction kept)", wait.Sum)
	}
	if wait.Bounds[0] != 1 || wait.Bounds[len(wait.Bounds)-1] != 10000 {
		t.Errorf("wait buckets %v, want 1 to 10000 ms", wait.Bounds)
	}
	if h := ms.hist(t, "keycap.hold_duration", slotAttrs(exports)...); !near(h.Sum, 2000) {
		t.Errorf("hold %v ms, want 2000", h.Sum)
	}
	if h := ms.hist(t, "keycap.api_pause_duration", attribute.String("api", "vendor")); !near(h.Sum, 60000) {
		t.Errorf("pause %v ms, want 60000", h.Sum)
	}
	if h := ms.hist(t, "keycap.store_outage_duration", attribute.String("node", "")); !near(h.Sum, 3000) {
		t.Errorf("outage %v ms, want 3000", h.Sum)
	}
	for _, name := range []string{"keycap.wait_duration", "keycap.hold_duration", "keycap.api_pause_duration", "keycap.store_outage_duration"} {
		if u := ms.get(t, name).Unit; u != "ms" {
			t.Errorf("%s: unit %q, want ms", name, u)
		}
	}

	for _, unit := range []string{"us", "seconds", "S"} {
		if _, err := otelobserver.New(&otelobserver.Config{DurationUnit: unit}); err == nil {
			t.Errorf("duration unit %q accepted", unit)
		}
	}
}

// TestGlobalProvider: a nil Config, or one without a MeterProvider, uses
// the global MeterProvider. (Not parallel: it sets the global provider. The
// other tests pass providers of their own, which it does not touch.)
func TestGlobalProvider(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	a, err := otelobserver.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := otelobserver.New(&otelobserver.Config{DurationUnit: "s"})
	if err != nil {
		t.Fatal(err)
	}
	a.Observe(keycap.Event{Kind: keycap.SlotAcquired, Limit: exports})
	b.Observe(keycap.Event{Kind: keycap.SlotAcquired, Limit: exports})
	if n := collect(t, reader).sum(t, "keycap.slot_acquired_count", slotAttrs(exports)...); n != 2 {
		t.Fatalf("global provider counted %d, want 2", n)
	}
}

// TestCacheBound: past the bound, events still count, with attributes
// built per call, and the cache grows no more.
func TestCacheBound(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otelobserver.Config{})
	otelobserver.SetMaxCached(obs, 3)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 20 {
				lim := keycap.Spec{Name: fmt.Sprintf("limit-%d", i), Max: 1 + w%2}.For(secret)
				obs.ObserveContext(context.Background(), keycap.Event{Kind: keycap.SlotAcquired, Limit: lim, Waited: time.Second})
				obs.Observe(keycap.Event{Kind: keycap.SlotReleased, Limit: lim})
				obs.Observe(keycap.Event{Kind: keycap.CallHeld, API: fmt.Sprint("api-", i)})
			}
		})
	}
	wg.Wait()
	if n := otelobserver.Cached(obs); n != 3 {
		t.Errorf("%d attribute sets cached, want the bound, 3", n)
	}
	ms := collect(t, reader)
	if n := ms.points(t, "keycap.slot_acquired_count"); n != 40 {
		t.Errorf("%d acquired series, want 40 (20 names, 2 maxes)", n)
	}
	for i := range 20 {
		for _, max := range []int{1, 2} {
			lim := keycap.Spec{Name: fmt.Sprintf("limit-%d", i), Max: max}.For("")
			if n := ms.sum(t, "keycap.slot_acquired_count", slotAttrs(lim)...); n != 4 {
				t.Errorf("%s max %d: %d acquired, want 4", lim.Name(), max, n)
			}
			if n := ms.sum(t, "keycap.slots_in_use", slotAttrs(lim)...); n != 0 {
				t.Errorf("%s max %d: %d in use, want 0", lim.Name(), max, n)
			}
			if h := ms.hist(t, "keycap.wait_duration", slotAttrs(lim, attribute.String("outcome", "acquired"))...); h.Count != 4 || !near(h.Sum, 4) {
				t.Errorf("%s max %d: %d waits, %v s; want 4, 4 s", lim.Name(), max, h.Count, h.Sum)
			}
		}
		if n := ms.sum(t, "keycap.api_held_count", attribute.String("api", fmt.Sprint("api-", i)), attribute.Bool("paced", false)); n != 8 {
			t.Errorf("api-%d: %d held, want 8", i, n)
		}
	}
}
