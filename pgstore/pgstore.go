// Package pgstore keeps keycap's leases, marks, pauses, paces and overrides in
// PostgreSQL, for teams that run River (or anything else) on PostgreSQL and
// have no Redis. It passes the same conformance suite as memstore and
// redisstore.
//
// Every decision is one round trip: a call to one PL/pgSQL function that
// takes a transaction-scoped advisory lock on the pool, drops its expired
// leases, counts and inserts, by the database's clock (clock_timestamp()).
// Releases, renewals (one batch per call), marks, pauses and paces are one
// round trip each too. Expired rows are cleaned without a cron: each acquire
// drops its pool's expired leases, and about one acquire (or queue) in a
// hundred sweeps up to a thousand expired rows of every table.
//
// Callers that wait queue in a line per pool (store.Lines: the ticket
// table, and the queue, fill and release functions), and are told of their
// handoff by NOTIFY on the channel <schema>_<prefix>wake
// (store.Notifications): the store holds one connection of the pool,
// LISTENing, while anyone waits.
//
// # Inspection and overrides
//
// The store has store.Inspection: InspectPools and InspectPauses return a
// page of a limit name's pools (their holders and wait lines) or of its
// pauses and paces, in one round trip each. A pool's ID starts with its
// name's tag, so a page is a range of the tables' primary keys, walked one
// index probe per pool from the cursor (the last pool shown): a page costs
// its own pools' rows, however many other pools the tables hold. A
// parent's pool lists every key's leases; each key lists its own under its
// pool (found by an index on the keys of parents).
//
// It has store.Overrides too: overrides (keycap.Override) live in a logged
// table of their own, kept across a crash and sent to standbys, and their
// version in a one-row table that every change bumps in its transaction.
// Setting, removing and reading them are one round trip each; a read when
// nothing changed reads the version's row alone.
//
// # Connections of its own
//
// The store runs each call on a connection of the pool you give it, in its
// own implicit transaction. Never give it a connection that is inside your
// application's transaction: a lease taken there would not be visible to
// anyone, nor released, until that transaction committed — the mistake the
// PHP seed warns about with its database store. A *pgxpool.Pool of its own,
// or the application's pool (whose connections are only in a transaction
// while one is explicitly begun on them), is right.
//
// # Migration
//
// Migrate installs the tables and functions from Go:
//
//	err := pgstore.Migrate(ctx, pool, pgstore.WithSchema("keycap"))
//
// SQL returns the same migration as plain SQL, for a DBA or a migration
// tool, rendered for the same options. Both are idempotent. The command
// pgstore-sql prints it, from a module that requires pgstore (or from this
// directory: go run ./cmd/pgstore-sql):
//
//	go run github.com/keycap/keycap/pgstore/cmd/pgstore-sql -schema keycap | psql "$DATABASE_URL"
//
// The schema's one source is migration.sql.tmpl in this directory, a
// text/template of the schema and prefix embedded in the package.
package pgstore

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/keycap/keycap/store"
)

//go:embed migration.sql.tmpl
var migrationTmpl string

var migration = template.Must(template.New("migration").Parse(migrationTmpl))

// Version is the version of the schema this package installs.
const Version = 8

// Defaults.
const (
	DefaultSchema  = "public"
	DefaultPrefix  = "keycap_"
	DefaultTimeout = 5 * time.Second
)

// Store is a keycap store (store.Store) on PostgreSQL.
type Store struct {
	store.Unsupported // asynchronous releases, pinned slots, partitions: not here

	pool    *pgxpool.Pool
	names   names
	timeout time.Duration
	sql     map[string]string
	hub     hub // Notify's listener
}

var _ store.Store = (*Store)(nil)

// features is what pgstore does: everything but pinned slots (a slot's
// holder can die without the database), asynchronous releases and
// partitions, over the network.
const features = store.Lines | store.Notifications | store.Shares | store.Members | store.Marks |
	store.Pauses | store.Paces | store.Inspection | store.Overrides | store.Fences | store.Totals

// Features implements store.Store.
func (s *Store) Features() store.Features { return features }

// An Option configures a Store, Migrate and SQL.
type Option struct{ apply func(*config) }

type config struct {
	schema, prefix string
	timeout        time.Duration
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// WithSchema sets the schema of keycap's tables (default DefaultSchema):
// letters, digits and underscores, not starting with a digit.
func WithSchema(schema string) Option { return Option{func(c *config) { c.schema = schema }} }

// WithPrefix sets the prefix of keycap's table and function names (default
// DefaultPrefix): letters, digits and underscores, not starting with a
// digit, or empty.
func WithPrefix(prefix string) Option { return Option{func(c *config) { c.prefix = prefix }} }

// WithTimeout bounds each call when the caller's context has no deadline
// (default DefaultTimeout): a database that hangs is a store failure, handled
// by each limit's fail mode. Positive.
func WithTimeout(d time.Duration) Option { return Option{func(c *config) { c.timeout = d }} }

// configure applies opts and checks the result, naming the field that is
// wrong.
func configure(opts []Option) (config, error) {
	c := config{schema: DefaultSchema, prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	switch {
	case !identifier.MatchString(c.schema):
		return config{}, fmt.Errorf("pgstore: invalid schema %q: letters, digits and underscores, not starting with a digit", c.schema)
	case c.prefix != "" && !identifier.MatchString(c.prefix):
		return config{}, fmt.Errorf("pgstore: invalid prefix %q: letters, digits and underscores, not starting with a digit", c.prefix)
	case c.timeout <= 0:
		return config{}, fmt.Errorf("pgstore: invalid timeout %s: must be positive", c.timeout)
	case len(names{c.schema, c.prefix}.channel()) > 63:
		return config{}, fmt.Errorf("pgstore: schema %q and prefix %q make a notification channel longer than PostgreSQL's 63 bytes", c.schema, c.prefix)
	}
	return c, nil
}

// names renders qualified names for the migration template.
type names struct{ Schema, Prefix string }

// T returns the qualified, quoted name of table t.
func (n names) T(t string) string { return pgx.Identifier{n.Schema, n.Prefix + t}.Sanitize() }

// Seq returns the qualified, quoted name of sequence q, as a string literal's
// content (for nextval).
func (n names) Seq(q string) string { return strings.ReplaceAll(n.T(q), "'", "''") }

// channel returns the NOTIFY channel of the store's handoffs.
func (n names) channel() string { return n.Schema + "_" + n.Prefix + "wake" }

// fence returns the fencing token of a grant whose result is column
// granted: the next value of the fence sequence, 0 when refused.
func (n names) fence(granted string) string {
	return "CASE WHEN " + granted + " THEN nextval('" + n.Seq("fence") + "') ELSE 0 END"
}

// Channel returns the channel as an identifier, for LISTEN.
func (n names) Channel() string { return pgx.Identifier{n.channel()}.Sanitize() }

// ChannelLiteral returns the channel as a string literal, for pg_notify.
func (n names) ChannelLiteral() string { return "'" + n.channel() + "'" }

// F returns the qualified, quoted name of function f.
func (n names) F(f string) string { return n.T(f) }

// Name returns an unqualified object name (an index, a constraint).
func (n names) Name(s string) string { return pgx.Identifier{n.Prefix + s}.Sanitize() }

// SQL returns the migration as plain SQL, for the schema and prefix of
// opts: what Migrate runs.
func SQL(opts ...Option) (string, error) {
	c, err := configure(opts)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := migration.Execute(&b, names{c.schema, c.prefix}); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Migrate installs (or brings up to date) keycap's tables and functions, in
// one transaction.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	sql, err := SQL(opts...)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Migrations of the same schema run one at a time.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(1262830445, 0)"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql)
		return err
	})
}

// New returns a store on pool, whose schema Migrate must have installed.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: pool is nil")
	}
	c, err := configure(opts)
	if err != nil {
		return nil, err
	}
	n := names{c.schema, c.prefix}
	s := &Store{pool: pool, names: n, timeout: c.timeout, hub: hub{channel: n.Channel()}, sql: map[string]string{
		"acquire":      "SELECT " + n.F("acquire") + "($1, $2, $3, $4)",
		"release":      "SELECT " + n.F("release") + "($1, $2, $3)",
		"queue":        "SELECT granted, ahead FROM " + n.F("queue") + "($1, $2, $3, $4, $5, $6)",
		"renew":        "SELECT * FROM " + n.F("renew") + "($1, $2, $3)",
		"sync":         "SELECT pool, removed FROM " + n.F("sync") + "($1, $2, $3, $4)",
		"mark":         "SELECT age_ms, started FROM " + n.F("mark") + "($1, $2)",
		"report_total": "SELECT version, state, report FROM " + n.F("report_total") + "($1, $2, $3, $4, $5)",
		"set_total":    "SELECT set_, version, state FROM " + n.F("set_total") + "($1, $2, $3, $4, $5)",
		"pause":        "SELECT " + n.F("pause") + "($1, $2)",
		"paused":       "SELECT " + n.F("paused") + "($1)",
		"pace":         "SELECT " + n.F("pace") + "($1, $2, $3, $4)",
		"wtake":        "SELECT granted, ahead FROM " + n.F("wtake") + "($1, $2, $3, $4, $5, $6, $7)",
		"ptake":        "SELECT granted, ahead FROM " + n.F("ptake") + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
		"pgive":        "SELECT " + n.F("pgive") + "($1, $2, $3, $4, $5, $6, $7, $8)",

		// The grants with a fencing token (store.Fences): nextval in the
		// statement of the call, so under the lock it took.
		"acquire_fenced": "SELECT g, 0, " + n.fence("g") + " FROM " + n.F("acquire") + "($1, $2, $3, $4) AS g",
		"queue_fenced":   "SELECT granted, ahead, " + n.fence("granted") + " FROM " + n.F("queue") + "($1, $2, $3, $4, $5, $6)",
		"wtake_fenced":   "SELECT granted, ahead, " + n.fence("granted") + " FROM " + n.F("wtake") + "($1, $2, $3, $4, $5, $6, $7)",
		"ptake_fenced":   "SELECT granted, ahead, " + n.fence("granted") + " FROM " + n.F("ptake") + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",

		"inspect":         "SELECT pool, kind, owner, weight, left_us FROM " + n.F("inspect") + "($1, $2, $3)",
		"inspect_pauses":  "SELECT id, pace, left_us FROM " + n.F("inspect_pauses") + "($1, $2, $3)",
		"set_override":    "SELECT " + n.F("set_override") + "($1, $2, $3, $4, $5, $6, $7)",
		"delete_override": "SELECT " + n.F("delete_override") + "($1)",
		"overrides":       "SELECT version, pool, family, name, key, max_, share_, left_us FROM " + n.F("overrides") + "($1)",
	}}
	return s, nil
}

// Pool returns the pool the store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// bound gives ctx the store's timeout when it has no deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

func wrap(op string, err error) error { return fmt.Errorf("pgstore: %s: %w", op, err) }

// Acquire implements store.Store: one function call. A plain demand calls
// acquire, or queue when it has a ticket (d.Line); a weighted one or a
// parent's key calls wtake or ptake (share.go). A pinned demand
// (store.Pinned) is refused: its holder could die without the database.
func (s *Store) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	switch {
	case d.Pinned:
		return store.Grant{}, store.Need(s, store.Pinned)
	case d.Fence:
		return s.acquireFenced(ctx, demand{d, pool, owner})
	case !d.Plain():
		return s.acquireShared(ctx, demand{d, pool, owner})
	case d.Line.TTL > 0:
		return s.queue(ctx, pool, owner, d.Max, d.TTL, d.Line)
	}
	ok, err := s.acquire(ctx, pool, owner, d.Max, d.TTL)
	return store.Grant{Granted: ok}, err
}

// Release implements store.Store: one function call, which hands the slot
// to the pool's line if anyone waits, and with leave takes the owner's
// ticket out of it too. A parent's key calls pgive (share.go).
func (s *Store) Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	if d.HasParent() {
		return s.releaseShared(ctx, demand{d, pool, owner}, leave)
	}
	op := "release"
	if leave {
		op = "dequeue"
	}
	return false, s.release(ctx, op, pool, owner, leave)
}

// demand is a Demand with the pool and the owner it is made for.
type demand struct {
	store.Demand
	Pool  store.PoolID
	Owner store.Owner
}

// acquire takes a plain slot: one call of acquire.
func (s *Store) acquire(ctx context.Context, pool store.PoolID, owner store.Owner, max int, ttl time.Duration) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var ok bool
	if err := s.pool.QueryRow(ctx, s.sql["acquire"], pool[:], owner[:], max, ms(ttl)).Scan(&ok); err != nil {
		return false, wrap("acquire", err)
	}
	return ok, nil
}

// release frees a lease of a pool without a parent, and with leave takes
// the owner's ticket out of the line: one call of release.
func (s *Store) release(ctx context.Context, op string, pool store.PoolID, owner store.Owner, leave bool) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, s.sql["release"], pool[:], owner[:], leave); err != nil {
		return wrap(op, err)
	}
	return nil
}

// queue takes a plain slot, or refuses and queues: one call of queue.
func (s *Store) queue(ctx context.Context, pool store.PoolID, owner store.Owner, max int, ttl time.Duration, t store.Ticket) (store.Grant, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var g store.Grant
	if err := s.pool.QueryRow(ctx, s.sql["queue"], pool[:], owner[:], max, ms(ttl), ms(t.TTL), ms(t.Claim)).Scan(&g.Granted, &g.Ahead); err != nil {
		return store.Grant{}, wrap("queue", err)
	}
	return g, nil
}

// Renew implements store.Store: one function call for the whole batch.
func (s *Store) Renew(ctx context.Context, batch []store.Renewal) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	pools, owners, ttls := make([][]byte, len(batch)), make([][]byte, len(batch)), make([]int64, len(batch))
	for i := range batch {
		r := &batch[i]
		pools[i], owners[i], ttls[i] = r.Pool[:], r.Owner[:], ms(r.TTL)
		if r.Parent != (store.PoolID{}) {
			pools[i] = append(r.Parent[:], r.Pool[:]...) // a parent's key: see the migration
		}
	}
	rows, err := s.pool.Query(ctx, s.sql["renew"], pools, owners, ttls)
	if err != nil {
		return wrap("renew", err)
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return wrap("renew", err)
	}
	if len(renewed) != len(batch) {
		return fmt.Errorf("pgstore: renew: %d results for %d leases", len(renewed), len(batch))
	}
	for i := range batch {
		batch[i].Lost, batch[i].Err = !renewed[i], nil
	}
	return nil
}

// Sync implements store.Store (store.Members): one function call for the whole batch.
func (s *Store) Sync(ctx context.Context, node store.NodeID, ttl time.Duration, batch []store.SyncPool) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var pools, members [][]byte
	for i := range batch {
		sp := &batch[i]
		if len(sp.Members) == 0 {
			pools, members = append(pools, sp.Pool[:]), append(members, nil)
		}
		for _, m := range sp.Members {
			pools, members = append(pools, sp.Pool[:]), append(members, m[:])
		}
	}
	rows, err := s.pool.Query(ctx, s.sql["sync"], node[:], ms(ttl), pools, members)
	if err != nil {
		return wrap("sync", err)
	}
	removed := map[store.PoolID]int{}
	var p []byte
	var n int
	_, err = pgx.ForEachRow(rows, []any{&p, &n}, func() error {
		removed[store.PoolID(p)] = n
		return nil
	})
	if err != nil {
		return wrap("sync", err)
	}
	for i := range batch {
		batch[i].Removed, batch[i].Err = removed[batch[i].Pool], nil
	}
	return nil
}

// Mark implements store.Store (store.Marks): one function call.
func (s *Store) Mark(ctx context.Context, id store.PoolID, ttl time.Duration) (time.Duration, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var age int64
	var started bool
	if err := s.pool.QueryRow(ctx, s.sql["mark"], id[:], ms(ttl)).Scan(&age, &started); err != nil {
		return 0, false, wrap("mark", err)
	}
	return time.Duration(age) * time.Millisecond, started, nil
}

// Pause implements store.Store (store.Pauses): one function call.
func (s *Store) Pause(ctx context.Context, id store.PoolID, d time.Duration) (time.Duration, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var left int64
	if err := s.pool.QueryRow(ctx, s.sql["pause"], id[:], ms(d)).Scan(&left); err != nil {
		return 0, wrap("pause", err)
	}
	return time.Duration(left) * time.Millisecond, nil
}

// Paused implements store.Store (store.Pauses): one function call.
func (s *Store) Paused(ctx context.Context, id store.PoolID) (time.Duration, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var left int64
	if err := s.pool.QueryRow(ctx, s.sql["paused"], id[:]).Scan(&left); err != nil {
		return 0, wrap("paused", err)
	}
	return time.Duration(left) * time.Millisecond, nil
}

// Pace implements store.Store (store.Paces) with GCRA: one function call.
func (s *Store) Pace(ctx context.Context, id store.PoolID, rate store.Rate) (time.Duration, error) {
	if !rate.Valid() {
		return 0, fmt.Errorf("pgstore: invalid rate %+v: events, period and burst must be positive", rate)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var wait int64
	if err := s.pool.QueryRow(ctx, s.sql["pace"], id[:], rate.Events, ms(rate.Period), rate.Burst).Scan(&wait); err != nil {
		return 0, wrap("pace", err)
	}
	return time.Duration(wait) * time.Millisecond, nil
}

// Tables returns the qualified names of the store's tables, for operators'
// queries.
func (s *Store) Tables() []string {
	var out []string
	for _, t := range []string{"lease", "mark", "pause", "rate", "ticket", "account", "pqueue", "override", "override_version"} {
		out = append(out, strings.Trim(s.names.T(t), " "))
	}
	return out
}
