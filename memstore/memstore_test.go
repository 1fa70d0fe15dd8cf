package memstore_test

import (
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) func() keycap.Store {
		s := memstore.New() // one process: every "client" shares the store
		return func() keycap.Store { return s }
	})
}
