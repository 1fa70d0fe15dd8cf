package main

import (
	"testing"

	"github.com/keycap/keycap/internal/testenv"
)

func TestExampleRuns(t *testing.T) {
	testenv.Redis(t)
	if err := run(testenv.RedisAddr()); err != nil {
		t.Fatal(err)
	}
}
