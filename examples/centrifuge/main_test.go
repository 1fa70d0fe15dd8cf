package main

import "testing"

func TestExampleRuns(t *testing.T) {
	if err := run(""); err != nil {
		t.Fatal(err)
	}
}
