package nullstore_test

import (
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/storedoc"
	"github.com/keycap/keycap/nullstore"
	"github.com/keycap/keycap/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) func() keycap.Store {
		s := nullstore.New()
		return func() keycap.Store { return s }
	}, storetest.GrantsEverything("nullstore turns limits off"))
}

// TestDocsListThisStore: the doc of every feature nullstore declares lists
// it, and none lists it that it does not declare.
func TestDocsListThisStore(t *testing.T) { storedoc.Check(t, "nullstore", nullstore.New()) }
