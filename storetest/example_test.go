package storetest_test

import (
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/nullstore"
	"github.com/keycap/keycap/storetest"
)

// A store runs the suite from its own tests. The body of testConformance is
// what goes in the store's _test.go file as
//
//	func TestConformance(t *testing.T) { ... }
//
// Run needs the *testing.T of a real test, so this example only compiles.
func ExampleRun() {
	testConformance := func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) func() keycap.Store {
			// Each test of the suite gets a fresh, empty namespace: for a
			// networked store, a new key prefix or database, dropped with
			// t.Cleanup. Every client opened in it must share its state, as
			// processes sharing one Redis do; each should have connections of
			// its own. memstore's state lives in the process, so a namespace
			// is one store, and each "client" is that store.
			s := memstore.New()
			return func() keycap.Store { return s }
		})
	}
	_ = testConformance
}

// A store that turns limits off (grants every slot, keeps nothing) says so,
// and the suite checks what it must still do: answer without errors, grant
// everything, keep a Limiter's events balanced.
func ExampleGrantsEverything() {
	testConformance := func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) func() keycap.Store {
			s := nullstore.New()
			return func() keycap.Store { return s }
		}, storetest.GrantsEverything("nullstore turns limits off"))
	}
	_ = testConformance
}
