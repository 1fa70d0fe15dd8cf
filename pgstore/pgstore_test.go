package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/storedoc"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/store"
	"github.com/keycap/keycap/storetest"
)

// migrated returns a fresh schema of the test's own, migrated.
func migrated(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	pool := pgenv.Pool(t)
	schema := pgenv.Schema(t, pool)
	if err := pgstore.Migrate(context.Background(), pool, pgstore.WithSchema(schema)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return pool, schema
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) func() keycap.Store {
		_, schema := migrated(t)
		// Each store has a pool of its own: independent connections, as
		// separate processes would have.
		return func() keycap.Store {
			s, err := pgstore.New(pgenv.Pool(t), pgstore.WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	if err := pgstore.Migrate(context.Background(), pool, pgstore.WithSchema(schema)); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	var v int
	if err := pool.QueryRow(context.Background(), "SELECT max(version) FROM "+schema+".keycap_migration").Scan(&v); err != nil || v != pgstore.Version {
		t.Fatalf("version %d, %v", v, err)
	}
}

// TestSQLRendersTheOptions: the migration names the schema and prefix it
// is given, and nothing of the template is left unrendered.
func TestSQLRendersTheOptions(t *testing.T) {
	t.Parallel()
	sql, err := pgstore.SQL(pgstore.WithSchema("kc_schema"), pgstore.WithPrefix("kc_"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE SCHEMA IF NOT EXISTS kc_schema;`, `"kc_schema"."kc_lease"`, `"kc_schema"."kc_acquire"`, `'kc_schema_kc_wake'`} {
		if !strings.Contains(sql, want) {
			t.Errorf("the migration does not contain %s", want)
		}
	}
	if strings.Contains(sql, "{{") || strings.Contains(sql, "keycap_lease") {
		t.Error("the migration holds template text, or a default name")
	}
}

func TestOptionsAreChecked(t *testing.T) {
	t.Parallel()
	for _, o := range []pgstore.Option{pgstore.WithSchema("a;drop"), pgstore.WithSchema(""), pgstore.WithPrefix("1x"), pgstore.WithTimeout(0)} {
		if _, err := pgstore.SQL(o); err == nil {
			t.Error("an invalid option was accepted")
		}
	}
	if _, err := pgstore.New(nil); err == nil {
		t.Error("a nil pool was accepted")
	}
}

func newStore(t *testing.T, schema string, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(pgenv.Pool(t), append([]pgstore.Option{pgstore.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLeaseOutlivesTheApplicationsTransaction: a lease taken while the
// application is inside a transaction is visible to everyone at once, and
// stays when that transaction rolls back: the store never uses the caller's
// transaction.
func TestLeaseOutlivesTheApplicationsTransaction(t *testing.T) {
	t.Parallel()
	appPool, schema := migrated(t)
	l, err := keycap.NewLimiter(newStore(t, schema), keycap.WithDefaultFailMode(keycap.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other, err := keycap.NewLimiter(newStore(t, schema), keycap.WithDefaultFailMode(keycap.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	lim := keycap.Spec{Name: "exports", Max: 1}.For("user:1")

	tx, err := appPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // the application's own work
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctx, lim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("while the application's transaction is open, the lease must already count: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("the application's rollback took the lease with it: %v", err)
	}
	lease.Release()
	if ls, err := other.Acquire(ctx, lim); err != nil {
		t.Fatalf("after Release: %v", err)
	} else {
		ls.Release()
	}
}

// TestFailuresAreStoreFailures: a database that is down, or a call that
// waits past the store's timeout (here on a pool lock another session
// holds), is a store failure, handled by the limit's fail mode.
func TestFailuresAreStoreFailures(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()

	// Down: nothing listens on port 1.
	down, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/x?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	ds, _ := pgstore.New(down, pgstore.WithSchema(schema))
	l, _ := keycap.NewLimiter(ds)
	defer l.Close()
	if _, err := l.Acquire(ctx, keycap.Spec{Name: "x", Max: 1, FailMode: keycap.FailClosed}.For("k")); !errors.Is(err, keycap.ErrStoreUnavailable) {
		t.Fatalf("database down, failing closed: %v", err)
	}
	if ls, err := l.Acquire(ctx, keycap.Spec{Name: "x", Max: 1}.For("k")); err != nil || ls.Guarded() {
		t.Fatalf("database down, failing open: %v", err)
	}

	// Timeout: another session holds the pool's lock.
	lim := keycap.Spec{Name: "x", Max: 1, FailMode: keycap.FailClosed}.For("blocked")
	p := lim.Pool()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT "+schema+".keycap_lock($1)", p[:]); err != nil {
		t.Fatal(err)
	}
	slow, _ := keycap.NewLimiter(newStore(t, schema, pgstore.WithTimeout(200*time.Millisecond)))
	defer slow.Close()
	start := time.Now()
	if _, err := slow.Acquire(ctx, lim); !errors.Is(err, keycap.ErrStoreUnavailable) {
		t.Fatalf("blocked past the timeout: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the timeout did not bound the call: %s", el)
	}
}

// TestExpiredRowsAreSwept: expired leases of pools nobody uses again are
// cleaned by the sweep that acquires run, without any cron.
func TestExpiredRowsAreSwept(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO `+schema+`.keycap_lease (pool, owner, expires_at)
		SELECT decode(lpad(to_hex(i), 32, '0'), 'hex'), '\x00'::bytea, now() - interval '1 minute'
		FROM generate_series(1, 3000) AS i`)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, schema)
	// About one acquire in a hundred sweeps up to a thousand rows: 1,500
	// acquires sweep the 3,000 stale rows but for a chance of 1 in 10^6.
	for range 1500 {
		p, o, d := store.PoolOf(0, "sweep", "k"), store.NewOwner(), store.Demand{Max: 10_000, TTL: time.Minute}
		if _, err := s.Acquire(ctx, p, o, d); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Release(ctx, p, o, d, false); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.keycap_lease`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows left after the sweeps, want 0", n)
	}
}

// TestSweepsNeverDeadlock runs sweeps alongside acquisitions that leave
// expired rows behind, from many connections: a sweep must skip the rows
// others hold rather than wait for them, or two sweeps (or a sweep and an
// acquire) lock rows in opposite orders and PostgreSQL aborts one of them.
func TestSweepsNeverDeadlock(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	s := newStore(t, schema)
	ctx := context.Background()
	const workers, rounds, keys = 8, 400, 20
	errs := make(chan error, 2*workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				p := store.PoolOf(0, "deadlock", fmt.Sprint((w*rounds+i)%keys))
				// Abandoned at once: 1 ms later every row is sweepable.
				d := store.Demand{Max: 1000, TTL: time.Millisecond}
				if _, err := s.Acquire(ctx, p, store.NewOwner(), d); err != nil {
					errs <- fmt.Errorf("acquire: %w", err)
					return
				}
			}
		})
		wg.Go(func() {
			for range rounds / 4 {
				if _, err := pool.Exec(ctx, `SELECT `+schema+`.keycap_sweep(clock_timestamp())`); err != nil {
					errs <- fmt.Errorf("sweep: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDocsListThisStore: every keycap interface pgstore implements lists it
// in its doc, and none lists it that it does not implement.
func TestDocsListThisStore(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := pgstore.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	storedoc.Check(t, "pgstore", s)
}

// TestIdleAccountsAreSwept: a parent's key that holds nothing and waits for
// nothing keeps its account while it is ahead of the parent's time, marked
// idle; sweep_accounts drops it once idle for 10 s, so one-off keys leave
// nothing behind.
func TestIdleAccountsAreSwept(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	s := newStore(t, schema)
	parent := store.PoolOf(0, "forget", "")
	shared := &store.Shared{Weight: 1, Parent: store.Parent{Pool: parent, Max: 10, Share: 1}}
	holder := store.Demand{Max: 1, TTL: time.Hour, Shared: shared}
	if g, err := s.Acquire(ctx, store.PoolOf(0, "forget-key", "holder"), store.NewOwner(), holder); err != nil || !g.Granted {
		t.Fatalf("holder: %v %v", g, err)
	}
	const n = 10
	for i := range n {
		p, o := store.PoolOf(0, "forget-key", fmt.Sprint(i)), store.NewOwner()
		d := store.Demand{Max: 1, TTL: time.Minute, Shared: shared}
		if g, err := s.Acquire(ctx, p, o, d); err != nil || !g.Granted {
			t.Fatalf("key %d: %v %v", i, g, err)
		}
		d.Held = 5 * time.Millisecond // ahead of the parent's time: the account stays
		if _, err := s.Release(ctx, p, o, d, false); err != nil {
			t.Fatal(err)
		}
	}
	idle := func() int {
		t.Helper()
		var c int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.keycap_account WHERE idle_at IS NOT NULL`).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if got := idle(); got != n {
		t.Fatalf("%d idle accounts after the releases, want %d", got, n)
	}
	if _, err := pool.Exec(ctx, `SELECT `+schema+`.keycap_sweep_accounts(now())`); err != nil {
		t.Fatal(err)
	}
	if got := idle(); got != n {
		t.Fatalf("%d idle accounts after a sweep at once, want %d: none idle 10 s yet", got, n)
	}
	if _, err := pool.Exec(ctx, `SELECT `+schema+`.keycap_sweep_accounts(now() + interval '11 seconds')`); err != nil {
		t.Fatal(err)
	}
	if got := idle(); got != 0 {
		t.Fatalf("%d idle accounts after a sweep 11 s on, want 0", got)
	}
}

// TestHeadThatExpiresUnblocksItsKey: a key's head ticket too heavy for the
// key's room blocks the ticket behind it; when that head expires, the next
// call of the waiter behind it is granted (its call places its key in the
// parent's queue before the fill). memstore and redisstore serve it only at
// a later call on the parent (issue 27's notes).
func TestHeadThatExpiresUnblocksItsKey(t *testing.T) {
	t.Parallel()
	_, schema := migrated(t)
	ctx := context.Background()
	s := newStore(t, schema)
	shared := &store.Shared{Weight: 1, Parent: store.Parent{Pool: store.PoolOf(0, "blocking-head", ""), Max: 5, Share: 1}}
	heavyShared := *shared
	heavyShared.Weight = 2
	key := store.PoolOf(0, "blocking-head-key", "k")
	long := store.Ticket{TTL: time.Minute, Claim: time.Minute}
	ask := func(o store.Owner, sh *store.Shared, tk store.Ticket) bool {
		t.Helper()
		g, err := s.Acquire(ctx, key, o, store.Demand{Max: 2, TTL: time.Minute, Shared: sh, Line: tk})
		if err != nil {
			t.Fatal(err)
		}
		return g.Granted
	}
	if !ask(store.NewOwner(), shared, store.Ticket{}) { // the key holds 1 of its 2
		t.Fatal("the first lease was refused")
	}
	if ask(store.NewOwner(), &heavyShared, store.Ticket{TTL: 300 * time.Millisecond, Claim: time.Minute}) {
		t.Fatal("a lease of 2 was granted beside 1 under a max of 2")
	}
	light := store.NewOwner()
	if ask(light, shared, long) {
		t.Fatal("the light caller overtook the heavy head")
	}
	time.Sleep(400 * time.Millisecond) // the heavy ticket expires (what is tested is time passing)
	if !ask(light, shared, long) {
		t.Fatal("the waiter behind an expired head was not granted at its next call")
	}
}
