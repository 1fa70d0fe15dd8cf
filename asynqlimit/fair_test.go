package asynqlimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/asynqlimit"
	"github.com/keycap/keycap/internal/jobtest"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/redisstore"
)

// finishTimes runs 40 tasks of customer 0 enqueued before 4 of customer 1
// on one asynq server of 12 workers, each task 100 ms, slots in Redis, with
// the rule of each task; it returns when each customer's tasks finished,
// from the start.
func finishTimes(t *testing.T, rule func(customer int) joblimit.Rule) map[int][]time.Duration {
	const work = 100 * time.Millisecond
	q := queueTB(t)
	rs, err := redisstore.New(testenv.Redis(t), redisstore.WithPrefix(testenv.Prefix(t, testenv.Redis(t))))
	if err != nil {
		t.Fatal(err)
	}
	l, err := keycap.NewLimiter(rs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	jobs, _ := joblimit.New(l)
	ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = ins.Close() })
	type done struct {
		customer int
		at       time.Time
	}
	finished := make(chan done, 100)
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: testenv.RedisAddr()}, asynq.Config{
		Concurrency:    12,
		Queues:         map[string]int{q: 1},
		IsFailure:      asynqlimit.IsFailure(nil),
		RetryDelayFunc: asynqlimit.RetryDelay(nil),
		LogLevel:       asynq.ErrorLevel,
		// Looks for tasks more often than asynq's default (1 s), so that
		// the test is short: a woken task runs at the next look.
		TaskCheckInterval: 50 * time.Millisecond,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.Middleware(jobs, func(_ context.Context, task *asynq.Task) (joblimit.Rule, bool) {
		var p payload
		_ = json.Unmarshal(task.Payload(), &p)
		return rule(p.Key), true
	}, asynqlimit.WithInspector(ins)))
	mux.HandleFunc("keyed", func(_ context.Context, task *asynq.Task) error {
		var p payload
		_ = json.Unmarshal(task.Payload(), &p)
		time.Sleep(work)
		finished <- done{p.Key, time.Now()}
		return nil
	})
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer client.Close()
	keys := slices.Repeat([]int{0}, 40)
	keys = append(keys, 1, 1, 1, 1)
	for _, k := range keys {
		b, _ := json.Marshal(payload{Key: k})
		if _, err := client.Enqueue(asynq.NewTask("keyed", b), asynq.Queue(q), asynq.MaxRetry(25)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	out := map[int][]time.Duration{}
	for i := range keys {
		d := testkit.Recv(t, finished, 30*time.Second, fmt.Sprintf("task %d of %d", i+1, len(keys)))
		out[d.customer] = append(out[d.customer], d.at.Sub(start))
	}
	return out
}

// TestParentSharesAsynqFairly: a customer's 4 tasks enqueued behind
// another's 40, under a parent of 4: with the parent, the light customer's
// tasks get the next slots that free and are done before half the flood's;
// as one total (a plain cap on one key) they wait for the whole backlog.
func TestParentSharesAsynqFairly(t *testing.T) {
	t.Parallel()
	parent := keycap.MustParent(fmt.Sprintf("asynq-fair-%d", time.Now().UnixNano()), 4)
	fair := finishTimes(t, func(customer int) joblimit.Rule {
		return joblimit.MustRule(fmt.Sprint("customer:", customer), keycap.Spec{Max: 4, Parent: parent}, joblimit.WithWaitInPlace(0))
	})
	line := finishTimes(t, func(int) joblimit.Rule {
		return joblimit.MustRule("all", keycap.Spec{Max: 4}, joblimit.WithWaitInPlace(0))
	})
	jobtest.CheckLightBeforeFlood(t, fair, line)
}
