package main

import (
	"testing"

	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
)

func TestExampleRuns(t *testing.T) {
	pgenv.Pool(t) // fails or skips, as the suite says, when PostgreSQL is missing
	if err := run(pgenv.URL(), ""); err != nil {
		t.Fatal(err)
	}
	testenv.Redis(t)
	if err := run(pgenv.URL(), testenv.RedisAddr()); err != nil {
		t.Fatal(err)
	}
}
