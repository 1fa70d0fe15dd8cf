package asynqlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/asynqlimit"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/memstore"
)

// BenchmarkTasks measures tasks per second through asynq with the middleware
// (slots with room for every task, on memstore and on Redis) and without it,
// in alternating rounds of the same benchmark: one server works a "bare"
// queue, the other a "limited" one, on the same Redis. limited/bare is the
// ratio of the rates. Tasks do nothing (the worst case: every cost shows) or
// wait 5 ms, as a task waiting on I/O does.
func BenchmarkTasks(b *testing.B) {
	for _, work := range []time.Duration{0, 5 * time.Millisecond} {
		for _, store := range []string{"memstore", "redis"} {
			b.Run(fmt.Sprintf("work=%s/store=%s", work, store), func(b *testing.B) { benchTasks(b, store, work) })
		}
	}
}

func benchTasks(b *testing.B, store string, work time.Duration) {
	bareQ, limitedQ := queueTB(b), queueTB(b)
	done := map[string]chan struct{}{bareQ: make(chan struct{}, 1024), limitedQ: make(chan struct{}, 1024)}
	start := func(q string, mw asynq.MiddlewareFunc) {
		srv := asynq.NewServer(asynq.RedisClientOpt{Addr: testenv.RedisAddr()}, asynq.Config{
			Concurrency: 20, Queues: map[string]int{q: 1},
			TaskCheckInterval: 5 * time.Millisecond, LogLevel: asynq.FatalLevel,
		})
		mux := asynq.NewServeMux()
		if mw != nil {
			mux.Use(mw)
		}
		mux.HandleFunc("noop", func(ctx context.Context, t *asynq.Task) error {
			time.Sleep(work) // the task's I/O
			queue, _ := asynq.GetQueueName(ctx)
			done[queue] <- struct{}{}
			return nil
		})
		if err := srv.Start(mux); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Shutdown)
	}
	var jobs *joblimit.Limiter
	if store == "memstore" {
		l, err := keycap.NewLimiter(memstore.New())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		jobs, _ = joblimit.New(l)
	} else {
		jobs = newJobs(b, testenv.Prefix(b, testenv.Redis(b)))
	}
	start(bareQ, nil)
	start(limitedQ, asynqlimit.Middleware(jobs, func(context.Context, *asynq.Task) (joblimit.Rule, bool) {
		return joblimit.MustRule("bench", keycap.Spec{Max: 10_000}), true
	}))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer client.Close()
	round := func(q string, n int) time.Duration {
		t0 := time.Now()
		for range n {
			if _, err := client.Enqueue(asynq.NewTask("noop", nil), asynq.Queue(q)); err != nil {
				b.Fatal(err)
			}
		}
		for range n {
			select {
			case <-done[q]:
			case <-time.After(time.Minute):
				b.Fatalf("a job of queue %s never finished", q)
			}
		}
		return time.Since(t0)
	}
	round(bareQ, 50)
	round(limitedQ, 50)
	var bareTime, limitedTime time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; {
		k := min(b.N-n, 200)
		bareTime += round(bareQ, k)
		limitedTime += round(limitedQ, k)
		n += k
	}
	b.StopTimer()
	b.ReportMetric(float64(bareTime)/float64(limitedTime), "limited/bare")
	b.ReportMetric(float64(b.N)/limitedTime.Seconds(), "limited-tasks/s")
	b.ReportMetric(float64(b.N)/bareTime.Seconds(), "bare-tasks/s")
}
