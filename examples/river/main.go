// Command river runs River jobs with at most 2 at once per customer, with
// the rule's defaults: a job with no free slot waits in the customer's
// line and runs the moment a slot frees, without spending an attempt.
//
//	go run ./examples/river                              # local PostgreSQL, slots in-process
//	go run ./examples/river -redis 127.0.0.1:6379        # slots in Redis, shared by every worker
//	go run ./examples/river -pg postgres://user@host/db  # another database
//
// It installs River's tables in a schema of its own (dropped at the end),
// inserts 30 jobs for 3 customers, works them with 12 workers, and prints
// each job as it starts and a summary.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/riverlimit"
)

// ExportArgs exports one customer's data: slow, and costly for a shared
// backend, so each customer gets at most 2 at once.
type ExportArgs struct {
	Customer string `json:"customer"`
	N        int    `json:"n"`
}

func (ExportArgs) Kind() string { return "export" }

type ExportWorker struct {
	river.WorkerDefaults[ExportArgs]
	jobs    *joblimit.Limiter
	running sync.Map // customer → *atomic.Int32
	done    chan *rivertype.JobRow
}

// Middleware limits each export by its customer: River calls it for every
// job of this worker.
func (w *ExportWorker) Middleware(job *rivertype.JobRow) []rivertype.WorkerMiddleware {
	return []rivertype.WorkerMiddleware{
		riverlimit.Middleware(w.jobs, func(job *rivertype.JobRow) (joblimit.Rule, bool) {
			var args ExportArgs
			if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
				return joblimit.Rule{}, false
			}
			return joblimit.MustRule("customer:"+args.Customer, keycap.Spec{Max: 2}, joblimit.WithDeadline(time.Hour)), true
		}),
	}
}

func (w *ExportWorker) Work(ctx context.Context, job *river.Job[ExportArgs]) error {
	c, _ := w.running.LoadOrStore(job.Args.Customer, new(atomic.Int32))
	n := c.(*atomic.Int32).Add(1)
	defer c.(*atomic.Int32).Add(-1)
	fmt.Printf("%-6s export %2d running (%d of 2 for %s; attempt %d)\n",
		job.Args.Customer, job.Args.N, n, job.Args.Customer, job.Attempt)
	time.Sleep(300 * time.Millisecond) // the export
	w.done <- job.JobRow
	return nil
}

func main() {
	pgURL := flag.String("pg", envOr("KEYCAP_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL URL")
	redisAddr := flag.String("redis", "", "Redis address for the slots; empty: in-process")
	flag.Parse()
	if err := run(*pgURL, *redisAddr); err != nil {
		log.Fatal(err)
	}
}

func run(pgURL, redisAddr string) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	schema := fmt.Sprintf("keycap_example_%d", os.Getpid())
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return fmt.Errorf("creating schema (is PostgreSQL at %s?): %w", pgURL, err)
	}
	defer func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") }()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}

	store := keycap.Store(memstore.New())
	if redisAddr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		if store, err = redisstore.New(rdb, redisstore.WithPrefix("example-river:")); err != nil {
			return err
		}
	}
	limiter, err := keycap.NewLimiter(store)
	if err != nil {
		return err
	}
	defer limiter.Close()
	jobs, err := joblimit.New(limiter)
	if err != nil {
		return err
	}

	const n = 30
	worker := &ExportWorker{jobs: jobs, done: make(chan *rivertype.JobRow, n)}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:  schema,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 12}},
		Workers: workers,
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, n)
	customers := []string{"acme", "globex", "initech"}
	for i := range params {
		params[i] = river.InsertManyParams{Args: ExportArgs{Customer: customers[i%3], N: i + 1}}
	}
	if _, err := client.InsertMany(ctx, params); err != nil {
		return err
	}
	fmt.Printf("%d exports for %d customers, 12 workers, at most 2 at once per customer\n\n", n, len(customers))
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	for range n {
		<-worker.done
	}
	elapsed := time.Since(start)
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return err
	}
	var attempts, snoozes int
	err = pool.QueryRow(ctx, `SELECT max(attempt), coalesce(sum((metadata->>'snoozes')::int), 0) FROM `+schema+`.river_job`).Scan(&attempts, &snoozes)
	if err != nil {
		return err
	}
	ideal := time.Duration(n/len(customers)) * 300 * time.Millisecond / 2
	fmt.Printf("\n%d exports done in %s (ideal %s); jobs snoozed %d times waiting for a slot; highest attempt: %d\n",
		n, elapsed.Round(10*time.Millisecond), ideal, snoozes, attempts)
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
