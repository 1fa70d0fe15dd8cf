package pgstore_test

import (
	"context"
	"errors"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/pgstore"
)

// A Limiter on PostgreSQL, for applications that have a database but no
// Redis: every process that shares the database shares the caps.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@10.0.0.7:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// Install the tables and functions: idempotent, so it can run at every
	// start-up or once at deploy time (pgstore.SQL gives the same migration
	// as plain SQL, for a DBA or a migration tool). Give Migrate and New the
	// same options.
	opts := []pgstore.Option{pgstore.WithSchema("keycap")}
	if err := pgstore.Migrate(ctx, pool, opts...); err != nil {
		log.Fatal(err)
	}
	// The store takes connections of its own from the pool, never your
	// transaction's: a slot counts for everyone at once, and a rollback does
	// not give it back.
	store, err := pgstore.New(pool, opts...)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	// At most 4 imports at once per tenant, across every server.
	imports := keycap.Spec{Name: "imports", Max: 4}.For("tenant:acme")
	err = limiter.Do(ctx, func(ctx context.Context) error {
		// ... run the import: the slot is held, and renewed, until it returns ...
		return nil
	}, imports)
	if errors.Is(err, keycap.ErrLimitExceeded) {
		log.Print("acme already runs 4 imports: try again later")
	}
}
