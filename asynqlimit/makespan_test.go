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
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/redisstore"
)

// makespan runs n tasks of d over keys with limit per key on one asynq
// server of workers workers, asynq's default settings but the two that
// make a release a non-failure, and the rule given; it returns how long
// the backlog took and how many times a task was released.
func makespan(tb testing.TB, store string, n, keys, limit, workers int, d time.Duration, opts ...joblimit.Option) (time.Duration, int64) {
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
		Concurrency:    workers,
		Queues:         map[string]int{q: 1},
		IsFailure:      asynqlimit.IsFailure(nil),
		RetryDelayFunc: asynqlimit.RetryDelay(nil),
		LogLevel:       asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.Middleware(jobs, func(_ context.Context, t *asynq.Task) (joblimit.Rule, bool) {
		var p payload
		_ = json.Unmarshal(t.Payload(), &p)
		return joblimit.MustRule(fmt.Sprint("customer:", p.Key), limit, opts...), true
	}, asynqlimit.WithInspector(ins)))
	mux.HandleFunc("keyed", func(context.Context, *asynq.Task) error {
		time.Sleep(d)
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
		testkit.Recv(tb, done, 3*time.Minute, fmt.Sprintf("task %d of %d", i+1, n))
	}
	return time.Since(start), released.Load()
}

// TestMakespanNearIdeal: 20 tasks of 300 ms for one customer, limit 2, 12
// workers, asynq's and the rule's defaults: the backlog takes close to its
// ideal 3 s, and no task is released.
func TestMakespanNearIdeal(t *testing.T) {
	t.Parallel()
	const n, limit, d = 20, 2, 300 * time.Millisecond
	ideal := n * d / limit
	took, released := makespan(t, "redis", n, 1, limit, 12, d)
	t.Logf("makespan %s (ideal %s, %.2f×), %d releases", took, ideal, float64(took)/float64(ideal), released)
	if took > ideal*11/10+500*time.Millisecond {
		t.Errorf("makespan %s, want at most 1.1 × %s + 0.5 s", took, ideal)
	}
	if float64(released+n)/n > 1.2 {
		t.Errorf("%d releases for %d tasks: more than 1.2 fetches per task", released, n)
	}
}

// BenchmarkMakespan: issue 17's backlog on asynq, with the rule's defaults
// (wait in place, then park), parking only (WithWaitInPlace(0): no worker
// waits; parked tasks woken with Inspector.RunTask), and as before lines
// (no wait, no handoff: the 10 s release delay plus jitter, then asynq's
// 5 s check of its retry set).
func BenchmarkMakespan(b *testing.B) {
	const limit, workers, d = 2, 12, 300 * time.Millisecond
	modes := []struct {
		name string
		opts []joblimit.Option
	}{
		{"defaults", nil},
		{"park-only", []joblimit.Option{joblimit.WithWaitInPlace(0)}},
		{"before", []joblimit.Option{joblimit.WithWaitInPlace(0), joblimit.WithoutHandoff()}},
	}
	for _, backlog := range []struct{ n, keys int }{{20, 1}, {60, 3}} {
		for _, store := range []string{"memstore", "redis"} {
			for _, m := range modes {
				if m.name == "before" && store != "memstore" {
					continue
				}
				b.Run(fmt.Sprintf("jobs=%dx%d/store=%s/%s", backlog.n/backlog.keys, backlog.keys, store, m.name), func(b *testing.B) {
					ideal := time.Duration(backlog.n/backlog.keys) * d / limit
					var took time.Duration
					var released int64
					for range b.N {
						t, r := makespan(b, store, backlog.n, backlog.keys, limit, workers, d, m.opts...)
						took, released = took+t, released+r
					}
					took /= time.Duration(b.N)
					b.ReportMetric(took.Seconds(), "makespan-s")
					b.ReportMetric(float64(took)/float64(ideal), "×ideal")
					b.ReportMetric(float64(released)/float64(b.N*backlog.n)+1, "fetches/job")
					b.ReportMetric(0, "ns/op")
				})
			}
		}
	}
}
