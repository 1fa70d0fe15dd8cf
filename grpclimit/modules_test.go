package grpclimit_test

import (
	"testing"

	"github.com/keycap/keycap/internal/testkit"
)

// TestModuleIsLight: a program that imports only grpclimit links none of the
// heavy modules other front doors need beyond the one it adapts.
func TestModuleIsLight(t *testing.T) {
	t.Parallel()
	mods, requires := testkit.ThisModule(t)
	_, linked := testkit.Consumer(t, []string{"github.com/keycap/keycap/grpclimit"}, mods, requires)
	testkit.CheckLight(t, linked, "google.golang.org/grpc")
	t.Logf("links %d modules: %v", len(linked), linked)
}
