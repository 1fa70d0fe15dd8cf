package otelobserver_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/otelobserver"
)

// BenchmarkObserve: one slot's SlotAcquired and SlotReleased, the events
// every request sends, recorded by the OpenTelemetry SDK. With the attribute
// sets cached, a pair allocates nothing.
func BenchmarkObserve(b *testing.B) {
	obs := benchObserver(b)
	acquired := keycap.Event{Kind: keycap.SlotAcquired, Limit: exports, Waited: time.Millisecond}
	released := keycap.Event{Kind: keycap.SlotReleased, Limit: exports, Held: 20 * time.Millisecond}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		obs.ObserveContext(ctx, acquired)
		obs.Observe(released)
	}
}

// BenchmarkObserveNoop: the pair on a no-op MeterProvider: the Observer's
// own cost, its attribute cache, without the SDK's.
func BenchmarkObserveNoop(b *testing.B) {
	obs, err := otelobserver.New(&otelobserver.Config{MeterProvider: noop.NewMeterProvider()})
	if err != nil {
		b.Fatal(err)
	}
	acquired := keycap.Event{Kind: keycap.SlotAcquired, Limit: exports, Waited: time.Millisecond}
	released := keycap.Event{Kind: keycap.SlotReleased, Limit: exports, Held: 20 * time.Millisecond}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		obs.ObserveContext(ctx, acquired)
		obs.Observe(released)
	}
}

// BenchmarkObserveParallel: the same pair from every CPU at once, on one
// limit: the SDK's aggregation is what the CPUs share.
func BenchmarkObserveParallel(b *testing.B) {
	obs := benchObserver(b)
	acquired := keycap.Event{Kind: keycap.SlotAcquired, Limit: exports, Waited: time.Millisecond}
	released := keycap.Event{Kind: keycap.SlotReleased, Limit: exports, Held: 20 * time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			obs.ObserveContext(ctx, acquired)
			obs.Observe(released)
		}
	})
}

// BenchmarkObserveSpan: the pair with the Acquire's span recording: the
// span event is what costs.
func BenchmarkObserveSpan(b *testing.B) {
	obs := benchObserver(b)
	acquired := keycap.Event{Kind: keycap.SlotAcquired, Limit: exports, Waited: time.Millisecond}
	released := keycap.Event{Kind: keycap.SlotReleased, Limit: exports, Held: 20 * time.Millisecond}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	ctx, span := tp.Tracer("bench").Start(context.Background(), "request")
	defer span.End()
	b.ReportAllocs()
	for b.Loop() {
		obs.ObserveContext(ctx, acquired)
		obs.Observe(released)
	}
}

func benchObserver(b *testing.B) *otelobserver.Observer {
	b.Helper()
	obs, err := otelobserver.New(&otelobserver.Config{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
	})
	if err != nil {
		b.Fatal(err)
	}
	return obs
}
