package peerbench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// BenchmarkRedisSlot measures taking and giving back one slot on Redis,
// from 1, 8 and 64 goroutines (each on a key of its own), for keycap (the
// store's calls, and a Limiter's Acquire and Release) beside the Redis locks
// Go programs use as a cap of one — bsm/redislock (SET NX, a script to
// release) and go-redsync (Redlock on one Redis) — and asynq's counting
// semaphore (x/rate: a script to take, a ZREM to give back;
// testenv.Semaphore), in alternating rounds with PING. Each metric is the peer's pairs/s over the PING rate: a pair of
// unbatched round trips has a ceiling of 0.5.
func BenchmarkRedisSlot(b *testing.B) {
	for _, g := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			c := testenv.Redis(b)
			prefix := testenv.Prefix(b, c)
			s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
			if err != nil {
				b.Fatal(err)
			}
			l, err := keycap.NewLimiter(s)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			locks := redislock.New(c)
			rs := redsync.New(goredis.NewPool(c))
			ctx := context.Background()
			pools := make([]store.PoolID, g)
			limits := make([]keycap.Limit, g)
			mutexes := make([]*redsync.Mutex, g)
			for i := range g {
				pools[i] = store.PoolOf(0, "peers", fmt.Sprint(i))
				limits[i] = keycap.Spec{Name: "peers-limiter", Max: 1}.For(fmt.Sprint(i))
				mutexes[i] = rs.NewMutex(fmt.Sprintf("%sredsync:%d", prefix, i), redsync.WithExpiry(time.Minute), redsync.WithTries(1))
			}
			ops := []struct {
				name string
				op   func(w int) error
			}{
				{"ping", func(int) error { return c.Ping(ctx).Err() }},
				{"keycap-store", func(w int) error {
					o := store.NewOwner()
					if gr, err := s.Acquire(ctx, pools[w], o, store.Demand{Max: 1, TTL: time.Minute}); err != nil || !gr.Granted {
						return fmt.Errorf("acquire: %v %v", gr.Granted, err)
					}
					_, err := s.Release(ctx, pools[w], o, store.Demand{}, false)
					return err
				}},
				{"keycap-limiter", func(w int) error {
					ls, err := l.Acquire(ctx, limits[w])
					if err != nil {
						return err
					}
					ls.Release()
					return nil
				}},
				{"redislock", func(w int) error {
					lock, err := locks.Obtain(ctx, fmt.Sprintf("%sredislock:%d", prefix, w), time.Minute, nil)
					if err != nil {
						return err
					}
					return lock.Release(ctx)
				}},
				{"asynq-semaphore", func(w int) error {
					sem, id := testenv.Semaphore{C: c, Key: fmt.Sprintf("%ssema:%d", prefix, w), Max: 1}, store.NewOwner().String()
					if ok, err := sem.Acquire(ctx, id, time.Now().Add(time.Minute)); err != nil || !ok {
						return fmt.Errorf("semaphore: %v %w", ok, err)
					}
					return sem.Release(ctx, id)
				}},
				{"redsync", func(w int) error {
					if err := mutexes[w].TryLockContext(ctx); err != nil {
						return err
					}
					_, err := mutexes[w].UnlockContext(ctx)
					return err
				}},
			}
			fns := make([]func(int) error, len(ops))
			for i, o := range ops {
				fns[i] = o.op
			}
			t := testkit.Alternate(b, g, max(g*50, 500), 200, fns...)
			for i, o := range ops[1:] {
				b.ReportMetric(float64(t[0])/float64(t[i+1]), o.name+"/ping")
			}
		})
	}
}
