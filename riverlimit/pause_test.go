package riverlimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap/internal/jobtest"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/riverlimit"
)

// callArgs is a job that calls the vendor once.
type callArgs struct {
	N int `json:"n"`
}

func (callArgs) Kind() string { return "call_vendor" }

type callWorker struct {
	river.WorkerDefaults[callArgs]
	http *http.Client
	ps   *pause.Pauses
	url  string
	done func(*rivertype.JobRow)
}

func (w *callWorker) Work(ctx context.Context, job *river.Job[callArgs]) error {
	// Throttled: RespectPauses pauses the API and snoozes the job.
	if err := jobtest.CallVendor(ctx, w.http, w.ps, w.url); err != nil {
		return err
	}
	w.done(job.JobRow)
	return nil
}

// vendorPauses returns the pause tests' Pauses on the shared Redis, with a
// client of its own.
func vendorPauses(rdb redis.UniversalClient, prefix string) (*pause.Pauses, *http.Client, error) {
	store, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	if err != nil {
		return nil, nil, err
	}
	return jobtest.VendorPauses(store)
}

func vendorAPI(*rivertype.JobRow) (string, bool) { return jobtest.Vendor, true }

func startCallClient(pool *pgxpool.Pool, schema string, ps *pause.Pauses, hc *http.Client, url string, workers int, done func(*rivertype.JobRow)) (*river.Client[pgx.Tx], error) {
	w := river.NewWorkers()
	river.AddWorker(w, &callWorker{http: hc, ps: ps, url: url, done: done})
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:            schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           w,
		Middleware:        []rivertype.Middleware{riverlimit.RespectPauses(ps, vendorAPI)},
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	return c, c.Start(context.Background())
}

// pauseWorker is the helper process of TestRespectPausesAcrossProcesses: a
// River client with one worker; it prints "done <job id> <attempt>".
func pauseWorker() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgenv.URL())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ps, hc, err := vendorPauses(redis.NewClient(testenv.RedisOptions()), os.Getenv("KEYCAP_PAUSE_PREFIX"))
	if err == nil {
		_, err = startCallClient(pool, os.Getenv("KEYCAP_PAUSE_SCHEMA"), ps, hc, os.Getenv("KEYCAP_VENDOR_URL"), 1, func(job *rivertype.JobRow) {
			fmt.Println("done", job.ID, job.Attempt)
		})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

// insertStaggered inserts three jobs, the last two once the first met the
// vendor's 429.
func insertStaggered(t *testing.T, pool *pgxpool.Pool, schema string, v *testkit.Vendor, ps *pause.Pauses) {
	t.Helper()
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	jobtest.EnqueueStaggered(t, v, ps, func() {
		n++
		if _, err := inserter.Insert(context.Background(), callArgs{N: n}, nil); err != nil {
			t.Fatal(err)
		}
	})
}

func checkSnoozed(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	var snoozed int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+schema+`.river_job WHERE metadata->>'keycap_snoozed_by' = 'pause:vendor'`).Scan(&snoozed); err != nil {
		t.Fatal(err)
	}
	if snoozed == 0 {
		t.Fatal("no job was snoozed for the pause: the test proved nothing")
	}
}

// TestRespectPauses: a vendor answers 429 with Retry-After: 2 to its first
// request. 3 jobs on 2 workers make that one request between them during the
// pause, all succeed after it, and no job's attempt count moved.
func TestRespectPauses(t *testing.T) {
	t.Parallel()
	pool := pgenv.Pool(t)
	schema := migrate(t, pool)
	rdb := testenv.Redis(t)
	v := testkit.NewVendor(t, 2*time.Second)
	ps, hc, err := vendorPauses(rdb, testenv.Prefix(t, rdb))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *rivertype.JobRow, 3)
	c, err := startCallClient(pool, schema, ps, hc, v.URL, 2, func(job *rivertype.JobRow) { done <- job })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(context.Background()) }()
	insertStaggered(t, pool, schema, v, ps)
	for range 3 {
		select {
		case job := <-done:
			if job.Attempt != 1 {
				t.Errorf("job %d succeeded on attempt %d, want 1: the pause spent attempts", job.ID, job.Attempt)
			}
		case <-time.After(time.Minute):
			t.Fatal("the jobs did not all succeed")
		}
	}
	v.CheckPauseHeld(t, 3)
	checkSnoozed(t, pool, schema)
}

// TestRespectPausesAcrossProcesses is the same with two separate worker
// processes sharing Redis, one worker each.
func TestRespectPausesAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool := pgenv.Pool(t)
	schema := migrate(t, pool)
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t, rdb)
	v := testkit.NewVendor(t, 2*time.Second)
	env := []string{"KEYCAP_PAUSE_SCHEMA=" + schema, "KEYCAP_PAUSE_PREFIX=" + prefix, "KEYCAP_VENDOR_URL=" + v.URL}
	helpers := []*testkit.Helper{
		testkit.StartHelper(t, "river-pause-worker", "ready", env...),
		testkit.StartHelper(t, "river-pause-worker", "ready", env...),
	}
	ps, _, err := vendorPauses(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	insertStaggered(t, pool, schema, v, ps)
	jobtest.AwaitDone(t, helpers, 3, "1") // River counts the first attempt
	v.CheckPauseHeld(t, 3)
	checkSnoozed(t, pool, schema)
}
