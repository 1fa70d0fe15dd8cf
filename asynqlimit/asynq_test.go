package asynqlimit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/asynqlimit"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/jobtype"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/redisstore"
)

// queue returns a queue name of the test's own, and deletes asynq's keys for
// it when the test ends.
func queue(t *testing.T) string { return queueTB(t) }

func queueTB(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	q := "keycaptest-" + hex.EncodeToString(b)
	c := testenv.Redis(t)
	t.Cleanup(func() {
		testenv.DeletePrefix(c, "asynq:{"+q+"}")
		c.SRem(context.Background(), "asynq:queues", q)
	})
	return q
}

func newJobs(t testing.TB, prefix string, obs ...keycap.Observer) *joblimit.Limiter {
	t.Helper()
	store, err := redisstore.New(testenv.Redis(t), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	l, err := keycap.NewLimiter(store, keycap.WithObserver(keycap.Observers(obs...)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	jobs, err := joblimit.New(l)
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

type payload struct {
	Key int `json:"key"`
}

func keyRule(_ context.Context, t *asynq.Task) (joblimit.Rule, bool) {
	var p payload
	if t.Type() != "keyed" || json.Unmarshal(t.Payload(), &p) != nil {
		return joblimit.Rule{}, false
	}
	return joblimit.MustRule(fmt.Sprint("key:", p.Key), keycap.Spec{Max: 2},
		joblimit.WithReleaseAfter(30*time.Millisecond), joblimit.WithJitter(30*time.Millisecond)), true
}

func newServerRule(t *testing.T, q string, jobs *joblimit.Limiter, rule func(context.Context, *asynq.Task) (joblimit.Rule, bool), h asynq.HandlerFunc, concurrency int, opts ...asynqlimit.Option) *asynq.Server {
	t.Helper()
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: testenv.RedisAddr()}, asynq.Config{
		Concurrency:              concurrency,
		Queues:                   map[string]int{q: 1},
		IsFailure:                asynqlimit.IsFailure(nil),
		RetryDelayFunc:           asynqlimit.RetryDelay(nil),
		DelayedTaskCheckInterval: 20 * time.Millisecond,
		TaskCheckInterval:        20 * time.Millisecond,
		ShutdownTimeout:          5 * time.Second,
		LogLevel:                 asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.Middleware(jobs, rule, opts...))
	mux.Handle("keyed", h)
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// TestTwoServers: 200 tasks over 10 keys with limit 2, worked by two asynq
// servers (25 workers each, more than the 20 slots) that share Redis. The
// handler counts its own concurrency per key: never above 2. Every task
// completes with a retry count of 0, and asynq counts no failure: the
// releases spent no retry.
func TestTwoServers(t *testing.T) {
	t.Parallel()
	// In place: refused tasks wait in the line holding their worker, and are
	// handed the next slot; parked: they are released at once, keep their
	// ticket, and are woken (Inspector.RunTask) when a slot is handed to them.
	for _, mode := range []string{"in place", "parked"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			twoServers(t, mode == "parked")
		})
	}
}

func twoServers(t *testing.T, parked bool) {
	const tasks, keys, limit = 200, 10, 2
	q := queue(t)
	prefix := testenv.Prefix(t, testenv.Redis(t))
	conc := testkit.NewConcurrency()
	retried := make(chan int, tasks)
	h := func(ctx context.Context, task *asynq.Task) error {
		var p payload
		_ = json.Unmarshal(task.Payload(), &p)
		key := strconv.Itoa(p.Key)
		conc.Enter(key)
		defer conc.Leave(key)
		time.Sleep(15 * time.Millisecond) // the task's work
		n, _ := asynq.GetRetryCount(ctx)
		retried <- n
		return nil
	}
	rec := &keycaptest.Recorder{}
	rule := keyRule
	var opts []asynqlimit.Option
	if parked {
		rule = func(ctx context.Context, task *asynq.Task) (joblimit.Rule, bool) {
			r, ok := keyRule(ctx, task)
			return joblimit.MustRule(r.Key(), keycap.Spec{Max: r.Max()}, joblimit.WithWaitInPlace(0),
				joblimit.WithParkFor(15*time.Second)), ok // a lost wake-up shows in seconds
		}
		ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
		t.Cleanup(func() { _ = ins.Close() })
		opts = append(opts, asynqlimit.WithInspector(ins))
	}
	for range 2 {
		newServerRule(t, q, newJobs(t, prefix, rec), rule, h, 25, opts...)
	}
	start := time.Now()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer client.Close()
	for i := range tasks {
		b, _ := json.Marshal(payload{Key: i % keys})
		if _, err := client.Enqueue(asynq.NewTask("keyed", b), asynq.Queue(q), asynq.MaxRetry(3)); err != nil {
			t.Fatal(err)
		}
	}
	timeout := time.After(2 * time.Minute)
	for i := range tasks {
		select {
		case n := <-retried:
			if n != 0 {
				t.Errorf("a task completed with retry count %d, want 0", n)
			}
		case <-timeout:
			t.Fatalf("only %d of %d tasks completed", i, tasks)
		}
	}
	took := time.Since(start)
	// The tasks must have met the limit, or the test proved nothing. On a
	// busy machine a key's tasks may all happen to run apart, so half the
	// keys meeting it is enough.
	contended := 0
	for key, p := range conc.Peaks() {
		switch {
		case p > limit:
			t.Errorf("key %s: %d tasks at once, limit %d", key, p, limit)
		case p == limit:
			contended++
		default:
			t.Logf("key %s: at most %d tasks at once, below the limit, %d", key, p, limit)
		}
	}
	if contended < keys/2 {
		t.Errorf("only %d of %d keys had %d tasks at once: the tasks were not contended", contended, keys, limit)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer insp.Close()
	// asynq counts a task processed after its handler returned, a moment
	// after the handler told the test it ran.
	var info *asynq.QueueInfo
	testkit.WaitUntil(t, 10*time.Second, "asynq to count every task processed", func() bool {
		var err error
		if info, err = insp.GetQueueInfo(q); err != nil {
			t.Fatal(err)
		}
		return info.Processed >= tasks
	})
	t.Logf("queue stats: processed %d, failed %d, retry %d, archived %d", info.Processed, info.Failed, info.Retry, info.Archived)
	if info.Failed != 0 || info.Archived != 0 {
		t.Fatalf("asynq counted %d failures and %d archived tasks; releases must count none", info.Failed, info.Archived)
	}
	refusals := rec.Count(keycap.LimitExceeded, "")
	t.Logf("%d tasks in %s; %d releases for want of a slot", tasks, took, refusals)
	switch {
	case parked && refusals == 0:
		t.Fatal("no task was ever parked: the test proved nothing")
	case parked && took > 5*time.Second:
		// Each key's 20 tasks of 15 ms take 150 ms at 2 at once: a run this
		// long means tasks came back at their fallback delay, not woken.
		t.Fatalf("took %s: parked tasks were not woken", took)
	case !parked && refusals > 0:
		t.Fatalf("%d releases: tasks waiting in place went back to the queue", refusals)
	}
	if info.Processed != tasks {
		t.Fatalf("asynq counted %d processed tasks, want %d (a release is not processed)", info.Processed, tasks)
	}
}

// TestPieces checks IsFailure and RetryDelay on wrapped errors, and that a
// task with no retries left is reported, not silently dropped.
func TestPieces(t *testing.T) {
	t.Parallel()
	rel := &jobtype.ReleaseError{By: "job:k", Delay: 42 * time.Second, Err: errors.New("full")}
	wrapped := fmt.Errorf("handler: %w", rel)
	isFailure := asynqlimit.IsFailure(nil)
	if isFailure(wrapped) || !isFailure(errors.New("real")) {
		t.Fatal("IsFailure: a wrapped release must be no failure, a real error a failure")
	}
	custom := asynqlimit.IsFailure(func(error) bool { return false })
	if custom(errors.New("real")) {
		t.Fatal("IsFailure does not defer to next")
	}
	delay := asynqlimit.RetryDelay(func(int, error, *asynq.Task) time.Duration { return time.Minute })
	if d := delay(3, wrapped, nil); d != 42*time.Second {
		t.Fatalf("RetryDelay = %s, want the release's 42s", d)
	}
	if d := delay(3, errors.New("real"), nil); d != time.Minute {
		t.Fatalf("RetryDelay for a real error = %s, want next's", d)
	}
	nr := &asynqlimit.NotReleasableError{Retried: 3, MaxRetry: 3, Err: rel}
	if !isFailure(nr) || delay(3, nr, nil) != time.Minute {
		t.Fatal("a task that cannot be released must be a failure")
	}
}

// TestNoRetriesLeft: a task enqueued with MaxRetry(0) that finds no slot is
// archived with an error saying it could not be released.
func TestNoRetriesLeft(t *testing.T) {
	t.Parallel()
	q := queue(t)
	jobs := newJobs(t, testenv.Prefix(t, testenv.Redis(t)))
	ran := make(chan struct{}, 1)
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: testenv.RedisAddr()}, asynq.Config{
		Concurrency: 1, Queues: map[string]int{q: 1},
		IsFailure: asynqlimit.IsFailure(nil), RetryDelayFunc: asynqlimit.RetryDelay(nil),
		TaskCheckInterval: 20 * time.Millisecond, LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.Middleware(jobs, func(context.Context, *asynq.Task) (joblimit.Rule, bool) {
		return joblimit.MustRule("full", keycap.Spec{Max: 0}), true // never a free slot
	}))
	mux.HandleFunc("keyed", func(context.Context, *asynq.Task) error { ran <- struct{}{}; return nil })
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer client.Close()
	info, err := client.Enqueue(asynq.NewTask("keyed", []byte(`{"key":1}`)), asynq.Queue(q), asynq.MaxRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: testenv.RedisAddr()})
	defer insp.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ti, err := insp.GetTaskInfo(q, info.ID)
		if err == nil && ti.State == asynq.TaskStateArchived {
			if want := "cannot be released"; !strings.Contains(ti.LastErr, want) {
				t.Fatalf("archived with %q, want a message saying it %s", ti.LastErr, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task not archived: %+v %v", ti, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran without a slot")
	default:
	}
}
