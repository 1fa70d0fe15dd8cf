package otelobserver_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/otelobserver"
)

func TestAdaptiveTotals(t *testing.T) {
	obs, reader := newObserver(t, otelobserver.Config{})
	obs.Observe(keycap.Event{Kind: keycap.TotalChanged, Tuning: &keycap.Tuning{Parent: "db", Total: 40, Previous: 44,
		Reason: "latency", Mean: 30 * time.Millisecond, Baseline: 20 * time.Millisecond, InFlight: 43.5}})
	obs.Observe(keycap.Event{Kind: keycap.TotalChanged, Tuning: &keycap.Tuning{Parent: "db", Total: 44, Previous: 40, Reason: "demand"}})
	ms := collect(t, reader)
	db := []attribute.KeyValue{attribute.String("parent", "db"), attribute.Bool("shadow", false)}
	if n := ms.sum(t, "keycap.parent_total_change_count", append(db, attribute.String("reason", "latency"))...); n != 1 {
		t.Fatalf("latency changes: %d, want 1", n)
	}
	g, ok := ms.get(t, "keycap.parent_total").Data.(metricdata.Gauge[int64])
	if !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != 44 {
		t.Fatalf("keycap.parent_total: %+v, want one point at 44", ms.get(t, "keycap.parent_total").Data)
	}
}
