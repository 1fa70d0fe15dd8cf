package otelobserver_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/keycap/keycap/internal/testkit"
)

// TestModuleIsLight: a program that imports only otelobserver links none of
// the heavy modules other front doors need (River, asynq, pgx, Prometheus,
// centrifuge, yaml), nor the OpenTelemetry SDK its tests use: only the
// OpenTelemetry API. (Its module graph may name more: the go.mod files of its
// dependencies' dependencies, never built.)
func TestModuleIsLight(t *testing.T) {
	t.Parallel()
	mods, requires := testkit.ThisModule(t)
	_, linked := testkit.Consumer(t, []string{"github.com/keycap/keycap/otelobserver"}, mods, requires)
	testkit.CheckLight(t, linked)
	for _, m := range linked {
		if strings.HasPrefix(m, "go.opentelemetry.io/otel/sdk") {
			t.Errorf("a program importing only otelobserver links %s", m)
		}
	}
	if !slices.Contains(linked, "go.opentelemetry.io/otel/metric") {
		t.Errorf("links %v, without go.opentelemetry.io/otel/metric", linked)
	}
	t.Logf("links %d modules: %v", len(linked), linked)
}
