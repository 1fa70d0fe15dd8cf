package asynqlimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/asynqlimit"
	"github.com/keycap/keycap/internal/jobtest"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/redisstore"
)

// makespan is jobtest.MakespanRun on one asynq server with asynq's default
// settings but the two that make a release a non-failure, and
// WithInspector; the jobs that went back to the queue are its releases.
func makespan(tb testing.TB, store string, n, keys int, opts ...joblimit.Option) (time.Duration, int64) {
	q := queueTB(tb)
	var s keycap.Store = memstore.New()
	if store == "redis" {
		rs, err := redisstore.New(testenv.Redis(tb), redisstore.WithPrefix(testenv.Prefix(tb, testenv.Redis(tb))))
		if err != nil {
			tb.Fatal(err)
		}
		s = rs
	}
	var released atomic.Int64
	l, err := keycap.NewLimiter(s, keycap.WithObserver(keycap.ObserverFunc(func(e keycap.Event) {
		if e.Kind == keycap.LimitExceeded {
			released.Add(1)
		}
	})))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	jobs, _ := joblimit.New(l)
	ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	tb.Cleanup(func() { _ = ins.Close() })
	done := make(chan struct{}, n)
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: testenv.RedisAddr()}, asynq.Config{
		Concurrency:    jobtest.Workers,
		Queues:         map[string]int{q: 1},
		IsFailure:      asynqlimit.IsFailure(nil),
		RetryDelayFunc: asynqlimit.RetryDelay(nil),
		LogLevel:       asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.Middleware(jobs, func(_ context.Context, t *asynq.Task) (joblimit.Rule, bool) {
		var p payload
		_ = json.Unmarshal(t.Payload(), &p)
		return joblimit.MustRule(fmt.Sprint("customer:", p.Key), keycap.Spec{Max: jobtest.Limit}, opts...), true
	}, asynqlimit.WithInspector(ins)))
	mux.HandleFunc("keyed", func(context.Context, *asynq.Task) error {
		time.Sleep(jobtest.JobTime)
		done <- struct{}{}
		return nil
	})
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer client.Close()
	for i := range n {
		b, _ := json.Marshal(payload{Key: i % keys})
		if _, err := client.Enqueue(asynq.NewTask("keyed", b), asynq.Queue(q), asynq.MaxRetry(25)); err != nil {
			tb.Fatal(err)
		}
	}
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		tb.Fatal(err)
	}
	defer srv.Shutdown()
	for i := range n {
		testkit.Recv(tb, done, jobtest.JobWait, fmt.Sprintf("task %d of %d", i+1, n))
	}
	return time.Since(start), released.Load()
}

// TestMakespanNearIdeal: issue 17's backlog on asynq, slots in Redis.
func TestMakespanNearIdeal(t *testing.T) {
	t.Parallel()
	jobtest.CheckMakespanNearIdeal(t, makespan, "redis")
}

// BenchmarkMakespan: issue 17's backlogs on asynq; asynq keeps its tasks in
// Redis, so memstore and Redis hold the slots.
func BenchmarkMakespan(b *testing.B) {
	jobtest.BenchMakespan(b, makespan, "memstore", "redis")
}
