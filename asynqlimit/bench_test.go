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
// in rounds of the same benchmark whose order turns: one server works a
// "bare" queue, another a "limited" one, on the same Redis; on Redis a third
// works a queue behind asynq's own counting semaphore (x/rate,
// testenv.Semaphore), the peer. limited/bare and semaphore/bare are the ratios of
// the rates. Tasks do nothing (the worst case: every cost shows) or wait
// 5 ms, as a task waiting on I/O does.
func BenchmarkTasks(b *testing.B) {
	for _, work := range []time.Duration{0, 5 * time.Millisecond} {
		for _, store := range []string{"memstore", "redis"} {
			b.Run(fmt.Sprintf("work=%s/store=%s", work, store), func(b *testing.B) { benchTasks(b, store, work) })
		}
	}
}

// semaphore is the middleware of asynq's x/rate example on a semaphore
// (testenv.Semaphore).
func semaphore(sem testenv.Semaphore) asynq.MiddlewareFunc {
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			d, ok := ctx.Deadline()
			id, _ := asynq.GetTaskID(ctx)
			if !ok {
				return fmt.Errorf("the task has no deadline")
			}
			got, err := sem.Acquire(ctx, id, d)
			if err != nil || !got {
				return fmt.Errorf("semaphore: %v %w", got, err)
			}
			defer sem.Release(ctx, id)
			return next.ProcessTask(ctx, t)
		})
	}
}

func benchTasks(b *testing.B, store string, work time.Duration) {
	type side struct {
		name, queue string
		mw          asynq.MiddlewareFunc
		time        time.Duration
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
	sides := []*side{
		{name: "bare", queue: queueTB(b)},
		{name: "limited", queue: queueTB(b), mw: asynqlimit.Middleware(jobs, func(context.Context, *asynq.Task) (joblimit.Rule, bool) {
			return joblimit.MustRule("bench", keycap.Spec{Max: 10_000}), true
		})},
	}
	if store == "redis" {
		c := testenv.Redis(b)
		sides = append(sides, &side{name: "semaphore", queue: queueTB(b), mw: semaphore(testenv.Semaphore{C: c, Key: testenv.Prefix(b, c) + "sema", Max: 10_000})})
	}
	done := make(map[string]chan struct{})
	for _, sd := range sides {
		done[sd.queue] = make(chan struct{}, 1024)
	}
	for _, sd := range sides {
		srv := asynq.NewServer(asynq.RedisClientOpt{Addr: testenv.RedisAddr()}, asynq.Config{
			Concurrency: 20, Queues: map[string]int{sd.queue: 1},
			TaskCheckInterval: 5 * time.Millisecond, LogLevel: asynq.FatalLevel,
		})
		mux := asynq.NewServeMux()
		if sd.mw != nil {
			mux.Use(sd.mw)
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
	for _, sd := range sides {
		round(sd.queue, 50)
	}
	b.ResetTimer()
	for n, r := 0, 0; n < b.N; r++ {
		k := min(b.N-n, 200)
		for i := range sides {
			sd := sides[(i+r)%len(sides)] // each goes first in turn
			sd.time += round(sd.queue, k)
		}
		n += k
	}
	b.StopTimer()
	for _, sd := range sides[1:] {
		b.ReportMetric(float64(sides[0].time)/float64(sd.time), sd.name+"/bare")
	}
	for _, sd := range sides {
		b.ReportMetric(float64(b.N)/sd.time.Seconds(), sd.name+"-tasks/s")
	}
}
