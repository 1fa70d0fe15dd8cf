package main

import (
	"io"
	"strings"
	"testing"

	"github.com/keycap/keycap/pgstore"
)

// TestPrintsTheMigration: the command prints what pgstore.SQL renders for
// its flags, and refuses what SQL refuses.
func TestPrintsTheMigration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		opts []pgstore.Option
	}{
		{nil, nil},
		{[]string{"-schema", "keycap", "-prefix", "kc_"}, []pgstore.Option{pgstore.WithSchema("keycap"), pgstore.WithPrefix("kc_")}},
		{[]string{"-prefix", ""}, []pgstore.Option{pgstore.WithPrefix("")}},
	} {
		want, err := pgstore.SQL(tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := run(tc.args, &out, io.Discard); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if out.String() != want {
			t.Fatalf("%q: printed SQL differs from pgstore.SQL", tc.args)
		}
	}
	for _, args := range [][]string{{"-schema", "a;drop"}, {"-prefix", "1x"}, {"extra"}, {"-unknown"}} {
		if err := run(args, io.Discard, io.Discard); err == nil {
			t.Errorf("%q was accepted", args)
		}
	}
}
