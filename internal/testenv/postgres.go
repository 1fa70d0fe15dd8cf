package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresURL returns the URL of the test database, or "".
func PostgresURL() string { return os.Getenv("KEYCAP_POSTGRES_URL") }

// Postgres returns a new pool on the test database, closed when t ends.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := PostgresURL()
	if url == "" {
		Missing(t, "PostgreSQL: KEYCAP_POSTGRES_URL is not set")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("KEYCAP_POSTGRES_URL: %v", err)
	}
	cfg.MaxConns = 20
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		Missing(t, "PostgreSQL at %s: %v", url, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Schema creates a schema of t's own in the test database, dropped when t
// ends, and returns its name.
func Schema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "keycaptest_" + hex.EncodeToString(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("creating schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+name+" CASCADE")
	})
	return name
}
