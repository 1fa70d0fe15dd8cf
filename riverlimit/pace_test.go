package riverlimit_test

import (
	"context"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/riverlimit"
)

// TestPaceJobs: 8 jobs on 4 workers, paced at 5 per second (burst 1) through
// Redis: they start at least 200 ms apart, and each on its first attempt.
func TestPaceJobs(t *testing.T) {
	t.Parallel()
	pool := pgenv.Pool(t)
	schema := migrate(t, pool)
	rdb := testenv.Redis(t)
	store, _ := redisstore.New(rdb, redisstore.WithPrefix(testenv.Prefix(t, rdb)))
	rate := pause.Rate{Events: 5, Period: time.Second, Burst: 1}
	ps, err := pause.New(testLimiter(t, store), pause.WithJitter(20*time.Millisecond), pause.WithRate(func(string) (pause.Rate, bool) { return rate, true }))
	if err != nil {
		t.Fatal(err)
	}
	type start struct {
		at      time.Time
		attempt int
	}
	starts := make(chan start, 8)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[keyedArgs]) error {
		starts <- start{time.Now(), job.Attempt}
		return nil
	}))
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema: schema, Workers: workers,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Middleware:    []rivertype.Middleware{riverlimit.PaceJobs(ps, func(*rivertype.JobRow) (string, bool) { return "vendor", true })},
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	params := make([]river.InsertManyParams, 8)
	for i := range params {
		params[i] = river.InsertManyParams{Args: keyedArgs{Key: i}}
	}
	if _, err := c.InsertMany(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(context.Background()) }()
	var at []time.Time
	for range 8 {
		select {
		case s := <-starts:
			if s.attempt != 1 {
				t.Errorf("a job started on attempt %d, want 1", s.attempt)
			}
			at = append(at, s.at)
		case <-time.After(time.Minute):
			t.Fatal("the jobs did not all run")
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	for i := 1; i < len(at); i++ {
		// GCRA spaces events by the emission interval; Redis keeps time to
		// the microsecond, the job's clock read comes a little after.
		if gap := at[i].Sub(at[i-1]); gap < 180*time.Millisecond {
			t.Errorf("jobs %d and %d started %s apart, under the rate's 200 ms", i, i+1, gap)
		}
	}
}
