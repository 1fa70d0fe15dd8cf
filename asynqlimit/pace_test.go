package asynqlimit_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/keycap/keycap/asynqlimit"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/redisstore"
)

// TestPaceJobs: 8 tasks on 4 workers, paced at 5 per second (burst 1)
// through Redis: they start at least 200 ms apart, with no retry spent.
func TestPaceJobs(t *testing.T) {
	t.Parallel()
	q := queue(t)
	rdb := testenv.Redis(t)
	store, _ := redisstore.New(rdb, redisstore.WithPrefix(testenv.Prefix(t, rdb)))
	rate := pause.Rate{Events: 5, Period: time.Second, Burst: 1}
	ps, err := pause.New(testLimiter(t, store), pause.WithJitter(20*time.Millisecond), pause.WithRate(func(string) (pause.Rate, bool) { return rate, true }))
	if err != nil {
		t.Fatal(err)
	}
	starts := make(chan time.Time, 8)
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: testenv.RedisAddr()}, asynq.Config{
		Concurrency: 4, Queues: map[string]int{q: 1},
		IsFailure: asynqlimit.IsFailure(nil), RetryDelayFunc: asynqlimit.RetryDelay(nil),
		TaskCheckInterval: 10 * time.Millisecond, DelayedTaskCheckInterval: 10 * time.Millisecond,
		LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.PaceJobs(ps, func(context.Context, *asynq.Task) (string, bool) { return "vendor", true }))
	mux.HandleFunc("paced", func(ctx context.Context, t *asynq.Task) error {
		if n, _ := asynq.GetRetryCount(ctx); n != 0 {
			return nil // reported below: starts gets no time
		}
		starts <- time.Now()
		return nil
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer client.Close()
	for range 8 {
		if _, err := client.Enqueue(asynq.NewTask("paced", nil), asynq.Queue(q)); err != nil {
			t.Fatal(err)
		}
	}
	var at []time.Time
	for range 8 {
		select {
		case s := <-starts:
			at = append(at, s)
		case <-time.After(time.Minute):
			t.Fatalf("%d of 8 tasks ran with no retry spent", len(at))
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 180*time.Millisecond {
			t.Errorf("tasks %d and %d started %s apart, under the rate's 200 ms", i, i+1, gap)
		}
	}
}
