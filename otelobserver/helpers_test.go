package otelobserver_test

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/otelobserver"
)

// newObserver returns an Observer on a MeterProvider of its own, and the
// reader to collect what it recorded.
func newObserver(t testing.TB, c otelobserver.Config) (*otelobserver.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := otelobserver.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	return obs, reader
}

// metrics is one collection, by instrument name.
type metrics map[string]metricdata.Metrics

func collect(t testing.TB, r *sdkmetric.ManualReader) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/keycap/keycap/otelobserver" {
			t.Fatalf("instrumentation scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			if _, dup := out[m.Name]; dup {
				t.Fatalf("%s collected twice", m.Name)
			}
			out[m.Name] = m
		}
	}
	return out
}

func (ms metrics) get(t testing.TB, name string) metricdata.Metrics {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		t.Fatalf("no %s among %d instruments", name, len(ms))
	}
	return m
}

// sum returns the value of the int64 sum name at exactly attrs, and fails
// if there is none.
func (ms metrics) sum(t testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	data, ok := ms.get(t, name).Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, not an int64 sum", name, ms.get(t, name).Data)
	}
	want := attribute.NewSet(attrs...)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	t.Fatalf("%s has no point at {%s}; it has %v", name, want.Encoded(attribute.DefaultEncoder()), pointSets(ms.get(t, name)))
	return 0
}

// hist returns the point of the float64 histogram name at exactly attrs.
func (ms metrics) hist(t testing.TB, name string, attrs ...attribute.KeyValue) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	data, ok := ms.get(t, name).Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, not a float64 histogram", name, ms.get(t, name).Data)
	}
	want := attribute.NewSet(attrs...)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp
		}
	}
	t.Fatalf("%s has no point at {%s}; it has %v", name, want.Encoded(attribute.DefaultEncoder()), pointSets(ms.get(t, name)))
	return metricdata.HistogramDataPoint[float64]{}
}

// gauge returns the value of the int64 gauge name at exactly attrs.
func (ms metrics) gauge(t testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	data, ok := ms.get(t, name).Data.(metricdata.Gauge[int64])
	if !ok {
		t.Fatalf("%s is a %T, not an int64 gauge", name, ms.get(t, name).Data)
	}
	want := attribute.NewSet(attrs...)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	t.Fatalf("%s has no point at {%s}; it has %v", name, want.Encoded(attribute.DefaultEncoder()), pointSets(ms.get(t, name)))
	return 0
}

// points returns the number of points of name.
func (ms metrics) points(t testing.TB, name string) int {
	t.Helper()
	return len(pointSets(ms.get(t, name)))
}

// pointSets returns the attribute sets of every point of m, and panics on a
// kind of data it does not know (so that no point goes unchecked).
func pointSets(m metricdata.Metrics) []attribute.Set {
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	default:
		panic(fmt.Sprintf("%s: data of type %T", m.Name, m.Data))
	}
	return sets
}

// slotAttrs are the attributes a slot event of lim is recorded with.
func slotAttrs(lim keycap.Limit, more ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{
		attribute.String("family", lim.Family().String()),
		attribute.String("limit", lim.Name()),
		attribute.Int("max", lim.Max()),
		attribute.Bool("shadow", lim.Shadow()),
	}, more...)
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
