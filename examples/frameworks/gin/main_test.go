package main

import (
	"testing"

	"github.com/keycap/keycap/examples/frameworks/internal/capcheck"
)

func TestCapHolds(t *testing.T) { capcheck.ThreeAtOnce(t, newEngine(newLimits()), "/reports/42") }
