package asynqlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/asynqlimit"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/redisstore"
)

// vendorPauses returns Pauses on the shared Redis and an HTTP client whose
// transport respects them. Releases are exercised: nothing waits in place.
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

// callVendor is a task handler that calls the vendor once; done is told the
// task's ID and retry count when it succeeds.
func callVendor(hc *http.Client, ps *pause.Pauses, url string, done func(id string, retried int)) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := ps.Check(resp); err != nil {
			return err // throttled: RespectPauses pauses the API and releases the task
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("vendor answered %d", resp.StatusCode)
		}
		id, _ := asynq.GetTaskID(ctx)
		n, _ := asynq.GetRetryCount(ctx)
		done(id, n)
		return nil
	}
}

func startCallServer(q string, ps *pause.Pauses, h asynq.HandlerFunc, concurrency int) (*asynq.Server, error) {
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: testenv.RedisAddr()}, asynq.Config{
		Concurrency: concurrency, Queues: map[string]int{q: 1},
		IsFailure: asynqlimit.IsFailure(nil), RetryDelayFunc: asynqlimit.RetryDelay(nil),
		TaskCheckInterval: 20 * time.Millisecond, DelayedTaskCheckInterval: 50 * time.Millisecond,
		LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.RespectPauses(ps, func(context.Context, *asynq.Task) (string, bool) { return "vendor", true }))
	mux.Handle("call_vendor", h)
	return srv, srv.Start(mux)
}

// pauseWorker is the helper process of TestRespectPausesAcrossProcesses: an
// asynq server with one worker; it prints "done <task id> <retried>".
func pauseWorker() int {
	ps, hc, err := vendorPauses(redis.NewClient(testenv.RedisOptions()), os.Getenv("KEYCAP_PAUSE_PREFIX"))
	if err == nil {
		_, err = startCallServer(os.Getenv("KEYCAP_PAUSE_QUEUE"), ps, callVendor(hc, ps, os.Getenv("KEYCAP_VENDOR_URL"), func(id string, n int) {
			fmt.Println("done", id, n)
		}), 1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

// enqueueStaggered enqueues one task, waits until the vendor throttled it and
// the pause is in Redis, then enqueues two more: all three meet the pause.
func enqueueStaggered(t *testing.T, q string, v *testenv.Vendor, ps *pause.Pauses) {
	t.Helper()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer client.Close()
	enqueue := func() {
		if _, err := client.Enqueue(asynq.NewTask("call_vendor", nil), asynq.Queue(q), asynq.MaxRetry(3)); err != nil {
			t.Fatal(err)
		}
	}
	enqueue()
	v.WaitRequests(t, 1)
	for {
		if left, err := ps.Paused(context.Background(), "vendor"); err == nil && left > 0 {
			break
		}
		time.Sleep(time.Millisecond) // the 429 is being recorded
	}
	enqueue()
	enqueue()
}

func checkNoFailure(t *testing.T, q string) {
	t.Helper()
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer insp.Close()
	info, err := insp.GetQueueInfo(q)
	if err != nil {
		t.Fatal(err)
	}
	if info.Failed != 0 || info.Processed != 3 {
		t.Fatalf("asynq counted %d processed and %d failed; want 3 and 0", info.Processed, info.Failed)
	}
}

// TestRespectPauses: a vendor answers 429 with Retry-After: 2 to its first
// request. 3 tasks on 2 workers make that one request between them during
// the pause, all succeed after it, and no task's retry count moved.
func TestRespectPauses(t *testing.T) {
	t.Parallel()
	q := queue(t)
	rdb := testenv.Redis(t)
	v := testenv.NewVendor(t, 2*time.Second)
	ps, hc, err := vendorPauses(rdb, testenv.Prefix(t, rdb))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 3)
	srv, err := startCallServer(q, ps, callVendor(hc, ps, v.URL, func(_ string, n int) { done <- n }), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	enqueueStaggered(t, q, v, ps)
	for range 3 {
		select {
		case n := <-done:
			if n != 0 {
				t.Errorf("a task succeeded with retry count %d, want 0: the pause spent retries", n)
			}
		case <-time.After(time.Minute):
			t.Fatal("the tasks did not all succeed")
		}
	}
	v.CheckPauseHeld(t, 3)
	checkNoFailure(t, q)
}

// TestRespectPausesAcrossProcesses is the same with two separate worker
// processes sharing Redis, one worker each.
func TestRespectPausesAcrossProcesses(t *testing.T) {
	t.Parallel()
	q := queue(t)
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t, rdb)
	v := testenv.NewVendor(t, 2*time.Second)
	env := []string{"KEYCAP_PAUSE_QUEUE=" + q, "KEYCAP_PAUSE_PREFIX=" + prefix, "KEYCAP_VENDOR_URL=" + v.URL}
	helpers := []*testenv.Helper{
		testenv.StartHelper(t, "asynq-pause-worker", "ready", env...),
		testenv.StartHelper(t, "asynq-pause-worker", "ready", env...),
	}
	ps, _, err := vendorPauses(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	enqueueStaggered(t, q, v, ps)
	timeout := time.After(time.Minute)
	for done := 0; done < 3; {
		var line string
		select {
		case line = <-helpers[0].Lines():
		case line = <-helpers[1].Lines():
		case <-timeout:
			t.Fatalf("%d of 3 tasks succeeded", done)
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "done" {
			continue
		}
		done++
		if n, _ := strconv.Atoi(f[2]); n != 0 {
			t.Errorf("task %s succeeded with retry count %s, want 0", f[1], f[2])
		}
	}
	v.CheckPauseHeld(t, 3)
	checkNoFailure(t, q)
}
