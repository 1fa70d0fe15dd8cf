package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// TestReleaseThenAcquireInOrder releases without waiting (the Limiter's
// way) and acquires the same slot of max 1 at once, many times, from
// several goroutines on their own keys: the store keeps one process's calls
// in order, so the acquire always finds the slot free, on one Redis and on
// the cluster, and with acknowledged grants (which go on a connection of
// their own).
func TestReleaseThenAcquireInOrder(t *testing.T) {
	t.Parallel()
	onEachBackend(t, func(t *testing.T, _ redis.UniversalClient, s *redisstore.Store) {
		releaseThenAcquire(t, s)
	})
	t.Run("cluster-acks", func(t *testing.T) {
		t.Parallel()
		c := testenv.RedisCluster(t)
		s, err := redisstore.New(c, redisstore.WithPrefix(testenv.Prefix(t, c)), redisstore.WithReplicaAcks(1, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		releaseThenAcquire(t, s)
	})
}

func releaseThenAcquire(t *testing.T, s *redisstore.Store) {
	l, err := keycap.NewLimiter(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			lim := keycap.Spec{Name: "in-order", Max: 1}.For(fmt.Sprint(g))
			// A plain lease, released without waiting, then a weighted one
			// that needs every slot of the pool: the weighted acquire, which
			// runs another script, must still find the release applied.
			plain := keycap.Spec{Name: "in-order-weighted", Max: 2}.For(fmt.Sprint(g))
			heavy := keycap.Spec{Name: "in-order-weighted", Max: 2, Weight: 2}.For(fmt.Sprint(g))
			for i := range 200 {
				if g%2 == 1 {
					lim = plain
					if i%2 == 1 {
						lim = heavy
					}
				}
				ls, err := l.Acquire(ctx, lim)
				if err != nil {
					errs <- fmt.Errorf("goroutine %d, acquire %d after a release: %w", g, i, err)
					return
				}
				ls.Release()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCloseFlushesReleases releases leases without waiting and closes the
// Limiter: when Close returns, every release has reached Redis.
func TestCloseFlushesReleases(t *testing.T) {
	t.Parallel()
	c := testenv.Redis(t)
	s := newStore(t, c, testenv.Prefix(t, c))
	l, err := keycap.NewLimiter(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var limits []keycap.Limit
	for i := range 50 {
		lim := keycap.Spec{Name: "close-flushes", Max: 2}.For(fmt.Sprint(i))
		limits = append(limits, lim)
		ls, err := l.Acquire(ctx, lim)
		if err != nil {
			t.Fatal(err)
		}
		ls.Release()
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, lim := range limits {
		if n, err := c.ZCard(ctx, s.Key(lim.Pool())).Result(); err != nil || n != 0 {
			t.Fatalf("%v after Close: %d leases (%v), want 0", lim, n, err)
		}
	}
}

// TestReleaseOnAHungRedisIsBounded releases on a Redis frozen with SIGSTOP:
// Release returns at once, Close within the decision budget (the release
// fails then, and is left to the retrier and the TTL), and the outage is
// reported once.
func TestReleaseOnAHungRedisIsBounded(t *testing.T) {
	t.Parallel()
	rp := testenv.StartRedis(t)
	c := redis.NewClient(rp.Options())
	defer c.Close()
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	const budget = 200 * time.Millisecond
	l, err := keycap.NewLimiter(s, keycap.WithDecisionBudget(budget))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var leases []*keycap.Lease
	for i := range 20 {
		ls, err := l.Acquire(ctx, keycap.Spec{Name: "hung-release", Max: 1}.For(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, ls)
	}
	rp.Hang()
	defer rp.Resume()
	start := time.Now()
	for _, ls := range leases {
		ls.Release()
	}
	// Waiting for the store, 20 releases would take 20 budgets (4 s).
	if took := time.Since(start); took > time.Second {
		t.Errorf("20 releases on a hung Redis took %s: Release must not wait for the store", took)
	}
	start = time.Now()
	_ = l.Close()
	// One budget for the releases in flight, one for the retrier's last
	// round (which stops at its first failure), and room for a busy machine;
	// trying every release in turn would take 20 budgets.
	if took := time.Since(start); took > 2*budget+time.Second {
		t.Errorf("Close on a hung Redis took %s, past twice the budget of %s", took, budget)
	}
	// The store itself reports a release that did not answer within its
	// budget as a timeout: a deadline passed before it was sent, or while it
	// waited for its reply.
	done := make(chan error, 1)
	start = time.Now()
	s.ReleaseAsync(store.PoolOf(0, "hung-release", "direct"), store.NewOwner(), store.Demand{}, 50*time.Millisecond, func(err error) { done <- err })
	select {
	case err := <-done:
		var ne net.Error
		if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("ReleaseAsync on a hung Redis: %v, want a timeout", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("ReleaseAsync with a budget of 50ms answered after %s on a hung Redis", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReleaseAsync's done was not called within 5s on a hung Redis")
	}
}
