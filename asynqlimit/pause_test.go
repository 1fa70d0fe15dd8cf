package asynqlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/asynqlimit"
	"github.com/keycap/keycap/internal/jobtest"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/redisstore"
)

// vendorPauses returns the pause tests' Pauses on the shared Redis, with a
// client of its own.
func vendorPauses(rdb redis.UniversalClient, prefix string) (*pause.Pauses, *http.Client, error) {
	store, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	if err != nil {
		return nil, nil, err
	}
	return jobtest.VendorPauses(store)
}

// callVendor is a task handler that calls the vendor once; done is told the
// task's ID and retry count when it succeeds.
func callVendor(hc *http.Client, ps *pause.Pauses, url string, done func(id string, retried int)) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		// Throttled: RespectPauses pauses the API and releases the task.
		if err := jobtest.CallVendor(ctx, hc, ps, url); err != nil {
			return err
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
	mux.Use(asynqlimit.RespectPauses(ps, func(context.Context, *asynq.Task) (string, bool) { return jobtest.Vendor, true }))
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

// enqueueStaggered enqueues three tasks, the last two once the first met
// the vendor's 429.
func enqueueStaggered(t *testing.T, q string, v *testkit.Vendor, ps *pause.Pauses) {
	t.Helper()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer client.Close()
	jobtest.EnqueueStaggered(t, v, ps, func() {
		if _, err := client.Enqueue(asynq.NewTask("call_vendor", nil), asynq.Queue(q), asynq.MaxRetry(3)); err != nil {
			t.Fatal(err)
		}
	})
}

func checkNoFailure(t *testing.T, q string) {
	t.Helper()
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer insp.Close()
	// asynq counts a task processed after its handler returned, a moment
	// after the handler told the test it succeeded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := insp.GetQueueInfo(q)
		if err != nil {
			t.Fatal(err)
		}
		if info.Failed != 0 {
			t.Fatalf("asynq counted %d failed tasks; want 0", info.Failed)
		}
		if info.Processed == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("asynq counted %d processed; want 3", info.Processed)
		}
		time.Sleep(10 * time.Millisecond) // asynq's counters have no signal to wait on
	}
}

// TestRespectPauses: a vendor answers 429 with Retry-After: 2 to its first
// request. 3 tasks on 2 workers make that one request between them during
// the pause, all succeed after it, and no task's retry count moved.
func TestRespectPauses(t *testing.T) {
	t.Parallel()
	q := queue(t)
	rdb := testenv.Redis(t)
	v := testkit.NewVendor(t, 2*time.Second)
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
	v := testkit.NewVendor(t, 2*time.Second)
	env := []string{"KEYCAP_PAUSE_QUEUE=" + q, "KEYCAP_PAUSE_PREFIX=" + prefix, "KEYCAP_VENDOR_URL=" + v.URL}
	helpers := []*testkit.Helper{
		testkit.StartHelper(t, "asynq-pause-worker", "ready", env...),
		testkit.StartHelper(t, "asynq-pause-worker", "ready", env...),
	}
	ps, _, err := vendorPauses(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	enqueueStaggered(t, q, v, ps)
	jobtest.AwaitDone(t, helpers, 3, "0") // asynq counts retries, not the first attempt
	v.CheckPauseHeld(t, 3)
	checkNoFailure(t, q)
}
