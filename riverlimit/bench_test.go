package riverlimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/riverlimit"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

// BenchmarkJobs measures jobs per second through River with the middleware
// (slots with room for every job, on memstore and on Redis) and without it,
// in alternating rounds of the same benchmark: one client works queue "bare",
// the other queue "limited", on one database. limited/bare is the ratio of
// the rates. Jobs do nothing (the worst case: every cost shows) or wait 5 ms,
// as a job waiting on I/O does.
func BenchmarkJobs(b *testing.B) {
	for _, work := range []time.Duration{0, 5 * time.Millisecond} {
		// memstore-steered: inspection (jobs labelled) and overrides on;
		// memstore-shadow: the rule a shadow rule (decided, never holding a
		// job back).
		for _, store := range []string{"memstore", "memstore-steered", "memstore-shadow", "redis"} {
			b.Run(fmt.Sprintf("work=%s/store=%s", work, store), func(b *testing.B) { benchJobs(b, store, work) })
		}
	}
}

func benchJobs(b *testing.B, store string, work time.Duration) {
	pool := pgenv.Pool(b)
	schema := pgenv.Schema(b, pool)
	migrateTB(b, pool, schema)
	prefix := testenv.Prefix(b, testenv.Redis(b))
	done := map[string]chan struct{}{"bare": make(chan struct{}, 1024), "limited": make(chan struct{}, 1024)}
	start := func(queue string, mw []rivertype.Middleware) *river.Client[pgx.Tx] {
		workers := river.NewWorkers()
		river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[noopArgs]) error {
			time.Sleep(work) // the job's I/O
			done[job.Queue] <- struct{}{}
			return nil
		}))
		c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			Schema: schema, Workers: workers, Middleware: mw,
			Queues:        map[string]river.QueueConfig{queue: {MaxWorkers: 20}},
			FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Stop(context.Background()) })
		return c
	}
	var jobs *joblimit.Limiter
	rule := joblimit.MustRule("bench", keycap.Spec{Max: 10_000})
	switch store {
	case "redis":
		jobs = newJobsTB(b, prefix)
	case "memstore":
		jobs = memJobs(b)
	case "memstore-steered":
		jobs = memJobs(b, keycap.WithInspection(keycap.InspectOptions{}), keycap.WithOverrides(time.Second))
	case "memstore-shadow":
		jobs = memJobs(b)
		rule = joblimit.MustRule("bench", keycap.Spec{Max: 10_000, Shadow: true})
	}
	room := riverlimit.Middleware(jobs, func(*rivertype.JobRow) (joblimit.Rule, bool) {
		return rule, true
	})
	bare := start("bare", nil)
	start("limited", []rivertype.Middleware{room})
	round := func(queue string, n int) time.Duration {
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{}, InsertOpts: &river.InsertOpts{Queue: queue}}
		}
		t0 := time.Now()
		if _, err := bare.InsertMany(context.Background(), params); err != nil {
			b.Fatal(err)
		}
		for range n {
			select {
			case <-done[queue]:
			case <-time.After(time.Minute):
				b.Fatalf("a job of queue %s never finished", queue)
			}
		}
		return time.Since(t0)
	}
	round("bare", 50)
	round("limited", 50)
	var bareTime, limitedTime time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; {
		k := min(b.N-n, 200)
		bareTime += round("bare", k)
		limitedTime += round("limited", k)
		n += k
	}
	b.StopTimer()
	b.ReportMetric(float64(bareTime)/float64(limitedTime), "limited/bare")
	b.ReportMetric(float64(b.N)/limitedTime.Seconds(), "limited-jobs/s")
	b.ReportMetric(float64(b.N)/bareTime.Seconds(), "bare-jobs/s")
}

func memJobs(b *testing.B, opts ...keycap.Option) *joblimit.Limiter {
	l, err := keycap.NewLimiter(memstore.New(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	jobs, _ := joblimit.New(l)
	return jobs
}
