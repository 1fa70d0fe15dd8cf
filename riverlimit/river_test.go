package riverlimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/jobtype"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/riverlimit"
)

// keyedArgs is a job that counts against its Key.
type keyedArgs struct {
	Key int `json:"key"`
}

func (keyedArgs) Kind() string { return "keyed" }

type keyedWorker struct {
	river.WorkerDefaults[keyedArgs]
	conc     *testkit.Concurrency
	work     time.Duration
	attempts chan int // the attempt number of each completed run
}

func (w *keyedWorker) Work(ctx context.Context, job *river.Job[keyedArgs]) error {
	key := strconv.Itoa(job.Args.Key)
	w.conc.Enter(key)
	defer w.conc.Leave(key)
	select {
	case <-time.After(w.work): // the job's work
	case <-ctx.Done():
		return ctx.Err()
	}
	w.attempts <- job.Attempt
	return nil
}

// migrate installs River's tables in a schema of the test's own.
func migrate(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	schema := pgenv.Schema(t, pool)
	migrateTB(t, pool, schema)
	return schema
}

func migrateTB(t testing.TB, pool *pgxpool.Pool, schema string) {
	t.Helper()
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(context.Background(), rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("migrating River: %v", err)
	}
}

// newJobs returns a joblimit Limiter on the shared Redis, with a client of its
// own, as another server would have.
func newJobs(t *testing.T, prefix string) *joblimit.Limiter { return newJobsTB(t, prefix) }

func newJobsTB(t testing.TB, prefix string) *joblimit.Limiter {
	t.Helper()
	store, err := redisstore.New(testenv.Redis(t), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	l, err := keycap.NewLimiter(store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	jobs, err := joblimit.New(l)
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

func newClient(t *testing.T, schema string, workers *river.Workers, mw rivertype.WorkerMiddleware, maxWorkers int) (*river.Client[pgx.Tx], *pgxpool.Pool) {
	t.Helper()
	pool := pgenv.Pool(t) // a pool of its own, as another server would have
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:            schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
		Middleware:        []rivertype.Middleware{mw},
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return client, pool
}

func keyRule(job *rivertype.JobRow) (joblimit.Rule, bool) {
	if job.Kind != "keyed" {
		return joblimit.Rule{}, false
	}
	var args struct{ Key int }
	if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
		return joblimit.Rule{}, false
	}
	return joblimit.MustRule(fmt.Sprint("key:", args.Key), keycap.Spec{Max: 2},
		joblimit.WithReleaseAfter(30*time.Millisecond), joblimit.WithJitter(30*time.Millisecond)), true
}

// TestTwoClients: 200 jobs over 10 keys with limit 2, worked by two separate
// River clients (25 workers each, more than the 20 slots) that share
// PostgreSQL and Redis. The job
// body counts its own concurrency per key: never above 2. Every job
// completes, on its first attempt: the snoozes spent no attempt.
func TestTwoClients(t *testing.T) {
	t.Parallel()
	// In place: refused jobs wait in the line holding their worker, and
	// are handed the next slot; parked: they are snoozed at once, keep
	// their ticket, and are woken (JobRetry) when a slot is handed to them.
	for _, mode := range []string{"in place", "parked"} {
		rule := keyRule
		if mode == "parked" {
			rule = func(job *rivertype.JobRow) (joblimit.Rule, bool) {
				r, ok := keyRule(job)
				return joblimit.MustRule(r.Key(), keycap.Spec{Max: r.Max()}, joblimit.WithWaitInPlace(0),
					joblimit.WithParkFor(15*time.Second)), ok // a lost wake-up shows in seconds
			}
		}
		t.Run(mode+"/redis", func(t *testing.T) {
			t.Parallel()
			prefix := testenv.Prefix(t, testenv.Redis(t))
			twoClients(t, rule, mode == "parked", func() *joblimit.Limiter { return newJobs(t, prefix) })
		})
		// The same on PostgreSQL alone: slots in pgstore, in River's own database.
		t.Run(mode+"/pgstore", func(t *testing.T) {
			t.Parallel()
			pool := pgenv.Pool(t)
			schema := pgenv.Schema(t, pool)
			if err := pgstore.Migrate(context.Background(), pool, pgstore.WithSchema(schema)); err != nil {
				t.Fatal(err)
			}
			twoClients(t, rule, mode == "parked", func() *joblimit.Limiter {
				store, err := pgstore.New(pgenv.Pool(t), pgstore.WithSchema(schema))
				if err != nil {
					t.Fatal(err)
				}
				l, err := keycap.NewLimiter(store)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				jobs, _ := joblimit.New(l)
				return jobs
			})
		})
	}
}

func twoClients(t *testing.T, rule func(*rivertype.JobRow) (joblimit.Rule, bool), parked bool, newJobs func() *joblimit.Limiter) {
	const jobsN, keys, limit = 200, 10, 2
	schema := migrate(t, pgenv.Pool(t))
	conc := testkit.NewConcurrency()
	attempts := make(chan int, jobsN)
	var clients []*river.Client[pgx.Tx]
	var pool *pgxpool.Pool
	for range 2 {
		workers := river.NewWorkers()
		river.AddWorker(workers, &keyedWorker{conc: conc, work: 15 * time.Millisecond, attempts: attempts})
		c, p := newClient(t, schema, workers, riverlimit.Middleware(newJobs(), rule), 25)
		clients, pool = append(clients, c), p
	}
	ctx := context.Background()
	params := make([]river.InsertManyParams, jobsN)
	for i := range params {
		params[i] = river.InsertManyParams{Args: keyedArgs{Key: i % keys}}
	}
	if _, err := clients[0].InsertMany(ctx, params); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	timeout := time.After(2 * time.Minute)
	for i := range jobsN {
		select {
		case a := <-attempts:
			if a != 1 {
				t.Errorf("a job completed on attempt %d, want 1: waiting for a slot spent attempts", a)
			}
		case <-timeout:
			t.Fatalf("only %d of %d jobs completed", i, jobsN)
		}
	}
	took := time.Since(start)
	for _, c := range clients {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := c.Stop(stopCtx); err != nil {
			t.Error(err)
		}
		cancel()
	}

	for key, p := range conc.Peaks() {
		if p > limit {
			t.Errorf("key %s: %d jobs at once, limit %d", key, p, limit)
		}
	}
	var completed, firstAttempt, snoozed, snoozes int
	err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'),
		count(*) FILTER (WHERE attempt = 1),
		count(*) FILTER (WHERE metadata ? 'keycap_snoozed_by'),
		coalesce(sum((metadata->>'snoozes')::int), 0)
		FROM `+schema+`.river_job`).Scan(&completed, &firstAttempt, &snoozed, &snoozes)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d jobs completed in %s, %d on their first attempt; %d jobs snoozed %d times in all", completed, took, firstAttempt, snoozed, snoozes)
	if completed != jobsN || firstAttempt != jobsN {
		t.Fatalf("%d completed, %d on attempt 1; want %d and %d", completed, firstAttempt, jobsN, jobsN)
	}
	// The jobs must have met the limit, or the test proved nothing. On a
	// busy machine a key's jobs may all happen to run apart, so half the
	// keys meeting it is enough.
	contended := 0
	for key, p := range conc.Peaks() {
		if p == limit {
			contended++
		} else {
			t.Logf("key %s: at most %d jobs at once, below the limit, %d", key, p, limit)
		}
	}
	if contended < keys/2 {
		t.Errorf("only %d of %d keys had %d jobs at once: the jobs were not contended", contended, keys, limit)
	}
	switch {
	case parked && (snoozes == 0 || snoozed == 0):
		t.Fatal("no job was ever parked: the test proved nothing")
	case parked && took > 5*time.Second:
		// Each key's 20 jobs of 15 ms take 150 ms at 2 at once: a run this
		// long means jobs came back at a fallback delay (the park's, or the
		// release's on a store without lines), not woken.
		t.Fatalf("took %s: parked jobs were not woken", took)
	case !parked && snoozes > 0:
		t.Fatalf("%d snoozes: jobs waiting in place went back to the queue", snoozes)
	}
}

// TestCannotSnoozeOutsideRiver: a job refused outside a River worker (here,
// the middleware called directly) is an error that says so, not a drop.
func TestCannotSnoozeOutsideRiver(t *testing.T) {
	t.Parallel()
	mw := riverlimit.Limit(newJobs(t, testenv.Prefix(t, testenv.Redis(t))), joblimit.MustRule("k", keycap.Spec{Max: 0}))
	ran := false
	err := mw.Work(context.Background(), &rivertype.JobRow{ID: 7, Kind: "keyed"}, func(context.Context) error { ran = true; return nil })
	var snooze *river.JobSnoozeError
	if ran || err == nil || errors.As(err, &snooze) || !errors.Is(err, jobtype.ErrReleased) {
		t.Fatalf("ran %v, err %v; want an error saying the job cannot be snoozed", ran, err)
	}
}
