package main

import (
	"testing"

	"github.com/keycap/keycap/internal/testenv"
)

func TestExampleRuns(t *testing.T) {
	testenv.Postgres(t) // fails or skips, as the suite says, when PostgreSQL is missing
	if err := run(testenv.PostgresURL(), ""); err != nil {
		t.Fatal(err)
	}
	testenv.Redis(t)
	if err := run(testenv.PostgresURL(), testenv.RedisAddr()); err != nil {
		t.Fatal(err)
	}
}
