package main

import (
	"testing"
	"time"
)

func TestExampleRuns(t *testing.T) {
	if err := run(3, 5, 2, 150*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
