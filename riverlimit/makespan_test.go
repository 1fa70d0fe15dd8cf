package riverlimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/jobtest"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/riverlimit"
)

// makespan is jobtest.MakespanRun on one River client with River's default
// fetch settings; the jobs that went back to the queue are its snoozes.
func makespan(tb testing.TB, store string, n, keys int, opts ...joblimit.Option) (time.Duration, int64) {
	pool := pgenv.Pool(tb)
	schema := pgenv.Schema(tb, pool)
	migrateTB(tb, pool, schema)
	var s keycap.Store
	switch store {
	case "memstore":
		s = memstore.New()
	case "redis":
		rs, err := redisstore.New(testenv.Redis(tb), redisstore.WithPrefix(testenv.Prefix(tb, testenv.Redis(tb))))
		if err != nil {
			tb.Fatal(err)
		}
		s = rs
	case "pgstore":
		if err := pgstore.Migrate(context.Background(), pool, pgstore.WithSchema(schema)); err != nil {
			tb.Fatal(err)
		}
		ps, err := pgstore.New(pool, pgstore.WithSchema(schema))
		if err != nil {
			tb.Fatal(err)
		}
		s = ps
	}
	l, err := keycap.NewLimiter(s)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	jobs, _ := joblimit.New(l)
	done := make(chan struct{}, n)
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(func(ctx context.Context, job *river.Job[keyedArgs]) error {
		time.Sleep(jobtest.JobTime)
		done <- struct{}{}
		return nil
	}))
	mw := riverlimit.Middleware(jobs, func(job *rivertype.JobRow) (joblimit.Rule, bool) {
		var a keyedArgs
		_ = json.Unmarshal(job.EncodedArgs, &a)
		return joblimit.MustRule(fmt.Sprint("customer:", a.Key), keycap.Spec{Max: jobtest.Limit}, opts...), true
	})
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema: schema, Workers: w, Middleware: []rivertype.Middleware{mw},
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: jobtest.Workers}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: keyedArgs{Key: i % keys}}
	}
	if _, err := c.InsertMany(context.Background(), params); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	if err := c.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		testkit.Recv(tb, done, jobtest.JobWait, fmt.Sprintf("job %d of %d", i+1, n))
	}
	took := time.Since(start)
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Stop(stop)
	var snoozes int64
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(sum((metadata->>'snoozes')::int), 0) FROM `+schema+`.river_job`).Scan(&snoozes); err != nil {
		tb.Fatal(err)
	}
	return took, snoozes
}

// TestMakespanNearIdeal: issue 17's backlog on River, slots in Redis.
func TestMakespanNearIdeal(t *testing.T) {
	t.Parallel()
	jobtest.CheckMakespanNearIdeal(t, makespan, "redis")
}

// BenchmarkMakespan: issue 17's backlogs on River, each store.
func BenchmarkMakespan(b *testing.B) {
	jobtest.BenchMakespan(b, makespan, "memstore", "redis", "pgstore")
}
