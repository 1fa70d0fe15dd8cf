package riverlimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
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
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.url, nil)
	resp, err := w.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := w.ps.Check(resp); err != nil {
		return err // throttled: RespectPauses pauses the API and snoozes the job
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("vendor answered %d", resp.StatusCode)
	}
	w.done(job.JobRow)
	return nil
}

// vendorPauses returns Pauses on the shared Redis, with a client of its own,
// and an HTTP client whose transport respects them. Releases are exercised:
// nothing waits in place.
func vendorPauses(rdb redis.UniversalClient, prefix string) (*pause.Pauses, *http.Client, error) {
	store, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	if err != nil {
		return nil, nil, err
	}
	// A Limiter that only makes store calls (no leases) starts no
	// goroutine: nothing to close.
	l, err := keycap.NewLimiter(store)
	if err != nil {
		return nil, nil, err
	}
	ps, err := pause.New(l, pause.WithJitter(300*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	tr := ps.Transport(nil, pause.WithAPIName(func(*http.Request) string { return "vendor" }), pause.WithMaxWaitInPlace(0))
	return ps, &http.Client{Transport: tr}, nil
}

func vendorAPI(*rivertype.JobRow) (string, bool) { return "vendor", true }

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
	pool, err := pgxpool.New(ctx, testenv.PostgresURL())
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

// insertStaggered inserts one job, waits until the vendor throttled it and
// the pause is in Redis, then inserts two more: all three meet the pause.
func insertStaggered(t *testing.T, pool *pgxpool.Pool, schema string, v *testenv.Vendor, ps *pause.Pauses) {
	t.Helper()
	ctx := context.Background()
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inserter.Insert(ctx, callArgs{N: 1}, nil); err != nil {
		t.Fatal(err)
	}
	v.WaitRequests(t, 1)
	for {
		if left, err := ps.Paused(ctx, "vendor"); err == nil && left > 0 {
			break
		}
		time.Sleep(time.Millisecond) // the 429 is being recorded
	}
	if _, err := inserter.InsertMany(ctx, []river.InsertManyParams{{Args: callArgs{N: 2}}, {Args: callArgs{N: 3}}}); err != nil {
		t.Fatal(err)
	}
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
	pool := testenv.Postgres(t)
	schema := migrate(t, pool)
	rdb := testenv.Redis(t)
	v := testenv.NewVendor(t, 2*time.Second)
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
	pool := testenv.Postgres(t)
	schema := migrate(t, pool)
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t, rdb)
	v := testenv.NewVendor(t, 2*time.Second)
	env := []string{"KEYCAP_PAUSE_SCHEMA=" + schema, "KEYCAP_PAUSE_PREFIX=" + prefix, "KEYCAP_VENDOR_URL=" + v.URL}
	helpers := []*testenv.Helper{
		testenv.StartHelper(t, "river-pause-worker", "ready", env...),
		testenv.StartHelper(t, "river-pause-worker", "ready", env...),
	}
	ps, _, err := vendorPauses(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	insertStaggered(t, pool, schema, v, ps)
	timeout := time.After(time.Minute)
	for done := 0; done < 3; {
		var line string
		select {
		case line = <-helpers[0].Lines():
		case line = <-helpers[1].Lines():
		case <-timeout:
			t.Fatalf("%d of 3 jobs succeeded", done)
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "done" {
			continue
		}
		done++
		if attempt, _ := strconv.Atoi(f[2]); attempt != 1 {
			t.Errorf("job %s succeeded on attempt %s, want 1", f[1], f[2])
		}
	}
	v.CheckPauseHeld(t, 3)
	checkSnoozed(t, pool, schema)
}
