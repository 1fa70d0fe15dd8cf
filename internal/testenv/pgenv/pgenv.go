// Package pgenv opens the test PostgreSQL database, apart from testenv so that
// tests that need only Redis do not pull pgx into their module.
package pgenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/keycap/keycap/internal/testenv"
)

// URL returns the URL of the test database, or "".
func URL() string { return os.Getenv("KEYCAP_POSTGRES_URL") }

// Pool returns a new pool on the test database, closed when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := URL()
	if url == "" {
		testenv.Missing(t, "PostgreSQL: KEYCAP_POSTGRES_URL is not set")
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
		testenv.Missing(t, "PostgreSQL at %s: %v", url, err)
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

// WireTrips counts round trips on database connections: each time a
// connection starts writing after it has read, a new request begins.
type WireTrips struct{ n atomic.Int64 }

// Load returns the round trips counted so far.
func (w *WireTrips) Load() int64 { return w.n.Load() }

type countedConn struct {
	net.Conn
	w       *WireTrips
	reading atomic.Bool
}

func (c *countedConn) Write(p []byte) (int, error) {
	if c.reading.Swap(false) {
		c.w.n.Add(1)
	}
	return c.Conn.Write(p)
}

func (c *countedConn) Read(p []byte) (int, error) {
	c.reading.Store(true)
	return c.Conn.Read(p)
}

// Counted is Pool with every connection's round trips counted,
// and at most conns connections.
func Counted(t testing.TB, conns int32) (*pgxpool.Pool, *WireTrips) {
	t.Helper()
	url := URL()
	if url == "" {
		testenv.Missing(t, "PostgreSQL: KEYCAP_POSTGRES_URL is not set")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w := &WireTrips{}
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc := &countedConn{Conn: c, w: w}
		cc.reading.Store(true) // the first write is a request too
		return cc, nil
	}
	cfg.MaxConns, cfg.MinConns = conns, conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err == nil {
		err = pool.Ping(context.Background())
	}
	if err != nil {
		testenv.Missing(t, "PostgreSQL at %s: %v", url, err)
	}
	t.Cleanup(pool.Close)
	return pool, w
}
