package riverlimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/jobtest"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/riverlimit"
)

// finishTimes runs 40 jobs of customer 0 inserted before 4 of customer 1 on
// one River client of 12 workers, each job 100 ms, slots in Redis, with the
// rule of each job; it returns when each customer's jobs finished, from the
// start.
func finishTimes(t *testing.T, rule func(customer int) joblimit.Rule) map[int][]time.Duration {
	const job = 100 * time.Millisecond
	pool := pgenv.Pool(t)
	schema := pgenv.Schema(t, pool)
	migrateTB(t, pool, schema)
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
	type done struct {
		customer int
		at       time.Time
	}
	finished := make(chan done, 100)
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(func(ctx context.Context, j *river.Job[keyedArgs]) error {
		time.Sleep(job)
		finished <- done{j.Args.Key, time.Now()}
		return nil
	}))
	mw := riverlimit.Middleware(jobs, func(j *rivertype.JobRow) (joblimit.Rule, bool) {
		var a keyedArgs
		_ = json.Unmarshal(j.EncodedArgs, &a)
		return rule(a.Key), true
	})
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema: schema, Workers: w, Middleware: []rivertype.Middleware{mw},
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 12}},
		Logger: slog.New(slog.DiscardHandler),
		// Fetches more often than River's default (1 s), so that the test
		// is short: a woken job runs at the next fetch.
		FetchPollInterval: 100 * time.Millisecond, FetchCooldown: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var params []river.InsertManyParams
	for range 40 {
		params = append(params, river.InsertManyParams{Args: keyedArgs{Key: 0}})
	}
	for range 4 {
		params = append(params, river.InsertManyParams{Args: keyedArgs{Key: 1}})
	}
	if _, err := c.InsertMany(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(stop)
	})
	out := map[int][]time.Duration{}
	for i := range len(params) {
		d := testkit.Recv(t, finished, 30*time.Second, fmt.Sprintf("job %d of %d", i+1, len(params)))
		out[d.customer] = append(out[d.customer], d.at.Sub(start))
	}
	return out
}

// TestParentSharesRiverFairly: a customer's 4 jobs queued behind another's
// 40, under a parent of 4: with the parent, the light customer's jobs get
// the next slots that free and are done before half the flood's; as one
// total (a plain cap on one key) they wait for the whole backlog. Refused
// jobs park (WithWaitInPlace(0)), so that workers go on to the next
// customer's jobs instead of waiting on the flood's.
func TestParentSharesRiverFairly(t *testing.T) {
	t.Parallel()
	parent := keycap.MustParent(fmt.Sprintf("river-fair-%d", time.Now().UnixNano()), 4)
	fair := finishTimes(t, func(customer int) joblimit.Rule {
		return joblimit.MustRule(fmt.Sprint("customer:", customer), keycap.Spec{Max: 4, Parent: parent}, joblimit.WithWaitInPlace(0))
	})
	line := finishTimes(t, func(int) joblimit.Rule {
		return joblimit.MustRule("all", keycap.Spec{Max: 4}, joblimit.WithWaitInPlace(0))
	})
	jobtest.CheckLightBeforeFlood(t, fair, line)
}
