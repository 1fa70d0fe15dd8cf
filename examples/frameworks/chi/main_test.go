package main

import (
	"testing"

	"github.com/keycap/keycap/examples/frameworks/internal/capcheck"
)

func TestCapHolds(t *testing.T) { capcheck.ThreeAtOnce(t, newRouter(newLimits()), "/reports/42") }

func TestInlineRoute(t *testing.T) {
	h := newRouter(newLimits())
	first, second := post(t, h), post(t, h)
	if first != 200 || second != 200 { // sequential: the slot is free again
		t.Fatalf("got %d, %d", first, second)
	}
}
