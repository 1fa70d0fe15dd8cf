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
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/riverlimit"
)

// makespan runs n jobs of d over keys (n/keys each) with limit per key on
// one River client of workers workers, River's default fetch settings, and
// the rule given; it returns how long the backlog took and how many
// snoozes it cost.
func makespan(tb testing.TB, store string, n, keys, limit, workers int, d time.Duration, opts ...joblimit.Option) (time.Duration, int) {
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
		time.Sleep(d)
		done <- struct{}{}
		return nil
	}))
	mw := riverlimit.Middleware(jobs, func(job *rivertype.JobRow) (joblimit.Rule, bool) {
		var a keyedArgs
		_ = json.Unmarshal(job.EncodedArgs, &a)
		return joblimit.MustRule(fmt.Sprint("customer:", a.Key), limit, opts...), true
	})
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema: schema, Workers: w, Middleware: []rivertype.Middleware{mw},
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
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
		testkit.Recv(tb, done, 3*time.Minute, fmt.Sprintf("job %d of %d", i+1, n))
	}
	took := time.Since(start)
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Stop(stop)
	var snoozes int
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(sum((metadata->>'snoozes')::int), 0) FROM `+schema+`.river_job`).Scan(&snoozes); err != nil {
		tb.Fatal(err)
	}
	return took, snoozes
}

// TestMakespanNearIdeal: 20 jobs of 300 ms for one customer, limit 2, 12
// workers, River's and the rule's defaults: the backlog takes close to
// its ideal 3 s (the figure before lines: 26.6 s, 20 snoozes), and no job
// is fetched twice.
func TestMakespanNearIdeal(t *testing.T) {
	t.Parallel()
	const n, limit, d = 20, 2, 300 * time.Millisecond
	ideal := n * d / limit
	took, snoozes := makespan(t, "redis", n, 1, limit, 12, d)
	t.Logf("makespan %s (ideal %s, %.2f×), %d snoozes", took, ideal, float64(took)/float64(ideal), snoozes)
	if took > ideal*11/10+500*time.Millisecond {
		t.Errorf("makespan %s, want at most 1.1 × %s + 0.5 s", took, ideal)
	}
	if float64(snoozes+n)/n > 1.2 {
		t.Errorf("%d snoozes for %d jobs: more than 1.2 fetches per job", snoozes, n)
	}
}

// BenchmarkMakespan: the backlog of issue 17, on each store, with the
// rule's defaults (wait in place, then park), parking only
// (WithWaitInPlace(0): no worker waits), and as before lines (no wait, no
// handoff: the 10 s release delay, plus jitter).
func BenchmarkMakespan(b *testing.B) {
	const limit, workers, d = 2, 12, 300 * time.Millisecond
	modes := []struct {
		name string
		opts []joblimit.Option
	}{
		{"defaults", nil},
		{"park-only", []joblimit.Option{joblimit.WithWaitInPlace(0)}},
		{"before", []joblimit.Option{joblimit.WithWaitInPlace(0), joblimit.WithoutHandoff()}},
	}
	for _, backlog := range []struct{ n, keys int }{{20, 1}, {60, 3}} {
		for _, store := range []string{"memstore", "redis", "pgstore"} {
			for _, m := range modes {
				if m.name == "before" && store != "memstore" {
					continue // the figure: memstore; 25 s a run
				}
				b.Run(fmt.Sprintf("jobs=%dx%d/store=%s/%s", backlog.n/backlog.keys, backlog.keys, store, m.name), func(b *testing.B) {
					ideal := time.Duration(backlog.n/backlog.keys) * d / limit
					var took time.Duration
					var snoozes int
					for range b.N {
						t, s := makespan(b, store, backlog.n, backlog.keys, limit, workers, d, m.opts...)
						took, snoozes = took+t, snoozes+s
					}
					took /= time.Duration(b.N)
					b.ReportMetric(took.Seconds(), "makespan-s")
					b.ReportMetric(float64(took)/float64(ideal), "×ideal")
					b.ReportMetric(float64(snoozes)/float64(b.N*backlog.n)+1, "fetches/job")
					b.ReportMetric(0, "ns/op")
				})
			}
		}
	}
}
