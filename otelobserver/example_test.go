package otelobserver_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sort"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/otelobserver"
)

// One Observer on the Limiter records the events of every front door built
// on it. Points have the limit's name as an attribute, never its key, so a
// million users make no more series than one.
func Example() {
	// An application passes nil (the global providers, set up with its
	// exporter) or its own MeterProvider; the example reads what was
	// recorded with a manual reader.
	reader := sdkmetric.NewManualReader()
	obs, err := otelobserver.New(&otelobserver.Config{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	// User 42 runs one export; a second at the same time is refused.
	ctx := context.Background()
	exports := keycap.Spec{Name: "exports", Max: 1}.For("user:42")
	lease, _ := limiter.Acquire(ctx, exports)
	_, err = limiter.Acquire(ctx, exports)
	fmt.Println("second export:", err)
	lease.Release()

	printSums(reader, "keycap.slot_acquired_count", "keycap.limit_exceeded_count",
		"keycap.slot_released_count", "keycap.slots_in_use")
	// Output:
	// second export: keycap: limit exceeded: exports (max 1)
	// keycap.limit_exceeded_count{family=app,limit=exports,max=1,shadow=false} 1
	// keycap.slot_acquired_count{family=app,limit=exports,max=1,shadow=false} 1
	// keycap.slot_released_count{family=app,limit=exports,max=1,shadow=false} 1
	// keycap.slots_in_use{family=app,limit=exports,max=1,shadow=false} 0
}

// The Limiter hands the Observer its Acquire's context, so that grants and
// refusals show on the request's span as events. A refusal leaves the
// span's status alone: it is a result, not an error.
func Example_spanEvents() {
	obs, err := otelobserver.New(&otelobserver.Config{MeterProvider: sdkmetric.NewMeterProvider()})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("app")

	ctx, span := tracer.Start(context.Background(), "GET /export")
	exports := keycap.Spec{Name: "exports", Max: 1}.For("user:42")
	lease, _ := limiter.Acquire(ctx, exports)
	_, _ = limiter.Acquire(ctx, exports)
	lease.Release()
	span.End()

	for _, ev := range spans.Ended()[0].Events() {
		set := attribute.NewSet(ev.Attributes...)
		limit, _ := set.Value("limit")
		max, _ := set.Value("max")
		fmt.Printf("%s limit=%s max=%d\n", ev.Name, limit.AsString(), max.AsInt64())
	}
	fmt.Println("status:", spans.Ended()[0].Status().Code)
	// Output:
	// keycap.slot_acquired limit=exports max=1
	// keycap.limit_exceeded limit=exports max=1
	// status: Unset
}

// printSums prints the int64 sums of the named instruments, one line per
// point, in the order of their names and attributes.
func printSums(reader *sdkmetric.ManualReader, names ...string) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !slices.Contains(names, m.Name) {
				continue
			}
			for _, dp := range sum.DataPoints {
				lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}
