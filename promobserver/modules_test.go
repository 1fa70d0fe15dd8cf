package promobserver_test

import (
	"testing"

	"github.com/keycap/keycap/internal/testkit"
)

// TestModuleIsLight: a program that imports only promobserver links none of the
// heavy modules other front doors need (River, asynq, pgx, Prometheus,
// centrifuge, yaml) beyond the ones promobserver adapts. (Its module graph may name
// more: the go.mod files of its dependencies' dependencies, never built.)
func TestModuleIsLight(t *testing.T) {
	t.Parallel()
	mods, requires := testkit.ThisModule(t)
	_, linked := testkit.Consumer(t, []string{"github.com/keycap/keycap/promobserver"}, mods, requires)
	testkit.CheckLight(t, linked, "github.com/prometheus/")
	t.Logf("links %d modules: %v", len(linked), linked)
}
