// Package testenv finds the services keycap's tests talk to.
//
//	KEYCAP_REDIS_ADDR        a Redis server, default 127.0.0.1:6379
//	KEYCAP_REDIS_CLUSTER     comma-separated seeds of a Redis Cluster
//	KEYCAP_REDIS_SENTINEL    a Redis Sentinel, watching master
//	                         KEYCAP_REDIS_SENTINEL_MASTER (default keycap-test)
//	KEYCAP_POSTGRES_URL      a PostgreSQL database URL
//	KEYCAP_REQUIRE_SERVICES  "1": a missing service fails the test
//
// Without KEYCAP_REQUIRE_SERVICES=1 a test whose service is missing is
// skipped, with a message that says what to set. The test command
// (scripts/test) starts every service and sets it, and so does CI.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Required reports whether a missing service must fail the tests.
func Required() bool { return os.Getenv("KEYCAP_REQUIRE_SERVICES") == "1" }

// Missing fails or skips t because a service is not there.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf("required service missing (KEYCAP_REQUIRE_SERVICES=1): "+format, args...)
	}
	t.Skipf("service missing, skipping (run scripts/test to start it): "+format, args...)
}

// RedisAddr returns the address of the test Redis.
func RedisAddr() string {
	if a := os.Getenv("KEYCAP_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// RedisOptions returns the options of a client of the test Redis.
func RedisOptions() *redis.Options {
	return &redis.Options{
		Addr:                  RedisAddr(),
		ContextTimeoutEnabled: true,
		PoolSize:              128,
	}
}

// Redis returns a new client of the test Redis, closed when t ends. Each call
// returns an independent client with its own connections.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(RedisOptions())
	t.Cleanup(func() { _ = c.Close() })
	ping(t, c, "Redis at "+RedisAddr()+" (KEYCAP_REDIS_ADDR)")
	return c
}

// ClusterSeeds returns the seeds of the test Redis Cluster, or nil.
func ClusterSeeds() []string {
	s := os.Getenv("KEYCAP_REDIS_CLUSTER")
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// RedisCluster returns a new client of the test Redis Cluster, closed when t
// ends. Each call returns an independent client.
func RedisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	seeds := ClusterSeeds()
	if seeds == nil {
		Missing(t, "Redis Cluster: KEYCAP_REDIS_CLUSTER is not set")
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 seeds,
		ContextTimeoutEnabled: true,
		PoolSize:              64,
	})
	t.Cleanup(func() { _ = c.Close() })
	ping(t, c, "Redis Cluster at "+strings.Join(seeds, ","))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok") {
		Missing(t, "Redis Cluster at %s is not ready: %v %q", strings.Join(seeds, ","), err, info)
	}
	return c
}

// RedisSentinel returns a new failover client that finds the test Redis
// through the test Sentinel, closed when t ends.
func RedisSentinel(t testing.TB) *redis.Client {
	t.Helper()
	addr := os.Getenv("KEYCAP_REDIS_SENTINEL")
	if addr == "" {
		Missing(t, "Redis Sentinel: KEYCAP_REDIS_SENTINEL is not set")
	}
	master := os.Getenv("KEYCAP_REDIS_SENTINEL_MASTER")
	if master == "" {
		master = "keycap-test"
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            master,
		SentinelAddrs:         []string{addr},
		ContextTimeoutEnabled: true,
		PoolSize:              64,
	})
	t.Cleanup(func() { _ = c.Close() })
	ping(t, c, "Redis through Sentinel at "+addr+" (master "+master+")")
	return c
}

func ping(t testing.TB, c redis.UniversalClient, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		Missing(t, "%s: %v", what, err)
	}
}

// Prefix returns a key prefix unique to this test run, so that tests sharing
// one Redis never see each other's keys. The keys under it are deleted when t
// ends.
func Prefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	p := "keycaptest:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() { DeletePrefix(c, p) })
	return p
}

// DeletePrefix deletes every key under prefix, on every master of a cluster.
func DeletePrefix(c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	del := func(ctx context.Context, n redis.UniversalClient) error {
		iter := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			n.Del(ctx, iter.Val())
		}
		return iter.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return del(ctx, n) })
		return
	}
	_ = del(ctx, c)
}
