// Command pgstore-sql prints pgstore's migration as plain SQL, for a DBA or
// a migration tool: the SQL that pgstore.Migrate runs, rendered by
// pgstore.SQL for a schema and a prefix. It is idempotent, like Migrate.
//
//	go run github.com/keycap/keycap/pgstore/cmd/pgstore-sql | psql "$DATABASE_URL"
//	go run github.com/keycap/keycap/pgstore/cmd/pgstore-sql -schema keycap > keycap.sql
//
// Run it from a module that requires github.com/keycap/keycap/pgstore (or
// from pgstore's directory: go run ./cmd/pgstore-sql), so that it prints
// the migration of the pgstore version your application runs. Give it the
// options you give pgstore.New.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/keycap/keycap/pgstore"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pgstore-sql:", err)
		os.Exit(2)
	}
}

// run prints the migration for the flags in args to out.
func run(args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("pgstore-sql", flag.ContinueOnError)
	fs.SetOutput(errOut)
	schema := fs.String("schema", pgstore.DefaultSchema, "the schema of keycap's tables (pgstore.WithSchema)")
	prefix := fs.String("prefix", pgstore.DefaultPrefix, "the prefix of keycap's table and function names (pgstore.WithPrefix)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	sql, err := pgstore.SQL(pgstore.WithSchema(*schema), pgstore.WithPrefix(*prefix))
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, sql)
	return err
}
