package asynqlimit_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/asynqlimit"
	"github.com/keycap/keycap/internal/jobtest"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/redisstore"
)

func TestMain(m *testing.M) {
	switch testkit.HelperRole() {
	case "asynq-worker":
		os.Exit(crashingWorker())
	case "asynq-pause-worker":
		os.Exit(pauseWorker())
	}
	os.Exit(m.Run())
}

func crashRule(context.Context, *asynq.Task) (joblimit.Rule, bool) { return jobtest.CrashRule(), true }

// crashingWorker is the helper process: an asynq server whose "hang" tasks
// never end, until the test kills it.
func crashingWorker() int {
	store, _ := redisstore.New(redis.NewClient(testenv.RedisOptions()), redisstore.WithPrefix(os.Getenv("KEYCAP_CRASH_PREFIX")))
	l, _ := keycap.NewLimiter(store)
	jobs, _ := joblimit.New(l)
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: testenv.RedisAddr()}, asynq.Config{
		Concurrency: 1, Queues: map[string]int{os.Getenv("KEYCAP_CRASH_QUEUE"): 1},
		IsFailure: asynqlimit.IsFailure(nil), RetryDelayFunc: asynqlimit.RetryDelay(nil),
		TaskCheckInterval: 20 * time.Millisecond, LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.Middleware(jobs, crashRule))
	mux.HandleFunc("hang", func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		fmt.Println("working", id)
		select {} // until killed
	})
	if err := srv.Start(mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

// TestWorkerKilledMidTask kills (SIGKILL) a worker process in the middle of a
// task: its slot frees itself within the slot's TTL, and asynq retries the
// task as usual (its recoverer finds the task's lease expired, which takes
// asynq up to a minute and a half), here on another server.
func TestWorkerKilledMidTask(t *testing.T) {
	t.Parallel()
	q := queue(t)
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t, rdb)
	h := testkit.StartHelper(t, "asynq-worker", "ready", "KEYCAP_CRASH_QUEUE="+q, "KEYCAP_CRASH_PREFIX="+prefix)
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer client.Close()
	info, err := client.Enqueue(asynq.NewTask("hang", nil), asynq.Queue(q), asynq.MaxRetry(5))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.WaitLine("working", time.Minute); !ok {
		t.Fatal("the helper never started the task")
	}

	store, _ := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	jobtest.CheckKilledWorkerFreesSlot(t, store, "hang", h.Kill)

	done := make(chan int, 1)
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: testenv.RedisAddr()}, asynq.Config{
		Concurrency: 1, Queues: map[string]int{q: 1},
		IsFailure: asynqlimit.IsFailure(nil),
		RetryDelayFunc: asynqlimit.RetryDelay(func(int, error, *asynq.Task) time.Duration {
			return 100 * time.Millisecond
		}),
		TaskCheckInterval: 20 * time.Millisecond, DelayedTaskCheckInterval: 100 * time.Millisecond,
		LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.Middleware(newJobs(t, prefix), crashRule))
	mux.HandleFunc("hang", func(ctx context.Context, t *asynq.Task) error {
		n, _ := asynq.GetRetryCount(ctx)
		done <- n
		return nil
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	select {
	case n := <-done:
		if n != 1 {
			t.Fatalf("task ran with retry count %d; want 1 (the crash counts, as asynq counts any expired lease)", n)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("asynq never retried task %s", info.ID)
	}
}
