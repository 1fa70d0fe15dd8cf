// Command asynq runs asynq tasks with at most 2 at once per tenant across
// servers, and shows that waiting for a slot spends no retry.
//
//	go run ./examples/asynq                        # local Redis on 127.0.0.1:6379
//	go run ./examples/asynq -redis 10.0.0.5:6379
//
// It enqueues 30 tasks for 3 tenants on a queue of its own, works them with
// two asynq servers of 6 workers each (as two machines would), and prints each
// task as it starts and a summary from asynq's own statistics.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/asynqlimit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/redisstore"
)

type report struct {
	Tenant string `json:"tenant"`
	N      int    `json:"n"`
}

func main() {
	addr := flag.String("redis", envOr("KEYCAP_REDIS_ADDR", "127.0.0.1:6379"), "Redis address (queue and slots)")
	flag.Parse()
	if err := run(*addr); err != nil {
		log.Fatal(err)
	}
}

func run(addr string) error {
	queue := fmt.Sprintf("keycap-example-%d", os.Getpid())
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	defer cleanup(rdb, queue)

	const n = 30
	var running sync.Map
	done := make(chan int, n)
	handle := func(ctx context.Context, t *asynq.Task) error {
		var r report
		_ = json.Unmarshal(t.Payload(), &r)
		c, _ := running.LoadOrStore(r.Tenant, new(atomic.Int32))
		k := c.(*atomic.Int32).Add(1)
		defer c.(*atomic.Int32).Add(-1)
		retried, _ := asynq.GetRetryCount(ctx)
		fmt.Printf("%-8s report %2d running (%d of 2 for %s; retried %d)\n", r.Tenant, r.N, k, r.Tenant, retried)
		time.Sleep(300 * time.Millisecond) // the report
		done <- retried
		return nil
	}
	rule := func(_ context.Context, t *asynq.Task) (joblimit.Rule, bool) {
		var r report
		if json.Unmarshal(t.Payload(), &r) != nil {
			return joblimit.Rule{}, false
		}
		return joblimit.MustRule("tenant:"+r.Tenant, keycap.Spec{Max: 2}, joblimit.WithReleaseAfter(200*time.Millisecond)), true // demo-sized; the default is 10 s
	}
	// Two servers, each with its own Redis client and Limiter: two machines.
	for range 2 {
		store, err := redisstore.New(redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}), redisstore.WithPrefix("example-asynq:"))
		if err != nil {
			return err
		}
		limiter, err := keycap.NewLimiter(store)
		if err != nil {
			return err
		}
		defer limiter.Close()
		jobs, err := joblimit.New(limiter)
		if err != nil {
			return err
		}
		srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, asynq.Config{
			Concurrency:              6,
			Queues:                   map[string]int{queue: 1},
			IsFailure:                asynqlimit.IsFailure(nil),
			RetryDelayFunc:           asynqlimit.RetryDelay(nil),
			DelayedTaskCheckInterval: 50 * time.Millisecond,
			LogLevel:                 asynq.WarnLevel,
		})
		mux := asynq.NewServeMux()
		mux.Use(asynqlimit.Middleware(jobs, rule))
		mux.HandleFunc("report", handle)
		if err := srv.Start(mux); err != nil {
			return err
		}
		defer srv.Shutdown()
	}

	client := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	defer client.Close()
	tenants := []string{"acme", "globex", "initech"}
	fmt.Printf("%d reports for %d tenants, 2 servers × 6 workers, at most 2 at once per tenant\n\n", n, len(tenants))
	start := time.Now()
	for i := range n {
		b, _ := json.Marshal(report{Tenant: tenants[i%3], N: i + 1})
		if _, err := client.Enqueue(asynq.NewTask("report", b), asynq.Queue(queue), asynq.MaxRetry(3)); err != nil {
			return err
		}
	}
	maxRetried := 0
	for range n {
		maxRetried = max(maxRetried, <-done)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: addr})
	defer insp.Close()
	info, err := insp.GetQueueInfo(queue)
	if err != nil {
		return err
	}
	fmt.Printf("\n%d reports done in %s; asynq counted %d processed, %d failed; highest retry count: %d\n",
		n, time.Since(start).Round(10*time.Millisecond), info.Processed, info.Failed, maxRetried)
	return nil
}

// cleanup deletes the example queue's keys.
func cleanup(rdb *redis.Client, queue string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "asynq:{"+queue+"}*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
	rdb.SRem(ctx, "asynq:queues", queue)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
