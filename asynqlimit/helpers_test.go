package asynqlimit_test

import (
	"testing"

	"github.com/keycap/keycap"
)

// testLimiter returns a Limiter on store, closed when t ends.
func testLimiter(t testing.TB, store keycap.Store) *keycap.Limiter {
	t.Helper()
	l, err := keycap.NewLimiter(store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}
