package riverlimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/jobtest"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/riverlimit"
)

func TestMain(m *testing.M) {
	switch testkit.HelperRole() {
	case "river-worker":
		os.Exit(crashingWorker())
	case "river-pause-worker":
		os.Exit(pauseWorker())
	}
	os.Exit(m.Run())
}

type hangArgs struct{}

func (hangArgs) Kind() string { return "hang" }

func crashRule(*rivertype.JobRow) (joblimit.Rule, bool) { return jobtest.CrashRule(), true }

// crashingWorker is the helper process: a River client whose "hang" jobs
// never end, until the test kills it.
func crashingWorker() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgenv.URL())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	store, _ := redisstore.New(redis.NewClient(testenv.RedisOptions()), redisstore.WithPrefix(os.Getenv("KEYCAP_CRASH_PREFIX")))
	l, _ := keycap.NewLimiter(store)
	jobs, _ := joblimit.New(l)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[hangArgs]) error {
		fmt.Println("working", job.ID)
		select {} // until killed
	}))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:            os.Getenv("KEYCAP_CRASH_SCHEMA"),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:           workers,
		Middleware:        []rivertype.Middleware{riverlimit.Middleware(jobs, crashRule)},
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		JobTimeout:        -1,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err == nil {
		err = client.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

// TestWorkerKilledMidJob kills (SIGKILL) a worker process in the middle of a
// job: its slot frees itself within the slot's TTL, and River retries the job
// as usual, here on another client.
func TestWorkerKilledMidJob(t *testing.T) {
	t.Parallel()
	pool := pgenv.Pool(t)
	schema := migrate(t, pool)
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t, rdb)
	h := testkit.StartHelper(t, "river-worker", "ready", "KEYCAP_CRASH_SCHEMA="+schema, "KEYCAP_CRASH_PREFIX="+prefix)

	ctx := context.Background()
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	res, err := inserter.Insert(ctx, hangArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.WaitLine("working", time.Minute); !ok {
		t.Fatal("the helper never started the job")
	}

	store, _ := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	jobtest.CheckKilledWorkerFreesSlot(t, store, hangArgs{}.Kind(), h.Kill)

	// River rescues the stuck job and retries it, as for any crash.
	done := make(chan *rivertype.JobRow, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[hangArgs]) error {
		done <- job.JobRow
		return nil
	}))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:               schema,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:              workers,
		Middleware:           []rivertype.Middleware{riverlimit.Middleware(newJobs(t, prefix), crashRule)},
		FetchCooldown:        5 * time.Millisecond,
		FetchPollInterval:    20 * time.Millisecond,
		JobTimeout:           time.Second,
		RescueStuckJobsAfter: 2 * time.Second,
		Logger:               slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	select {
	case job := <-done:
		if job.ID != res.Job.ID || job.Attempt != 2 {
			t.Fatalf("job %d ran on attempt %d; want job %d on attempt 2 (the killed one counts, as for any crash)", job.ID, job.Attempt, res.Job.ID)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("River never retried the job")
	}
}
