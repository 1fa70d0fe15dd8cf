package redisstore_test

import (
	"context"
	"errors"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/redisstore"
)

// A Limiter on one Redis: every process that shares the Redis shares the
// caps, so "2 exports at once per user" holds across all your servers.
func ExampleNew() {
	// ContextTimeoutEnabled lets the Limiter's decision budget (250 ms by
	// default) bound every call; New refuses a client without it.
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "10.0.0.5:6379",
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()

	// The prefix keeps this application's keys apart from others' on the
	// same Redis. New makes no call: a Redis that is down now is a store
	// failure on first use, handled by each limit's fail mode.
	store, err := redisstore.New(rdb, redisstore.WithPrefix("myapp:"))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	exports := keycap.Spec{Name: "exports", Max: 2}.For("user:42")
	lease, err := limiter.Acquire(context.Background(), exports)
	if errors.Is(err, keycap.ErrLimitExceeded) {
		log.Print("user 42 already runs 2 exports, on this server or another")
		return
	} else if err != nil {
		log.Print(err)
		return
	}
	defer lease.Release() // the Limiter renews the slot until then
	// ... run the export ...
}

// On Redis Cluster, give a few seed nodes: go-redis finds the other masters.
// Each pool is one key with a hash tag, so every decision is one round trip
// to one master, and the store tells go-redis to reload the slots as soon
// as a master stops answering, so that decisions resume once a replica has
// taken over.
func ExampleNew_cluster() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"},
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()

	store, err := redisstore.New(rdb, redisstore.WithPrefix("myapp:"))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	// ... use limiter as on a single Redis ...
}

// With Redis Sentinel, a failover client follows the master the sentinels
// name.
func ExampleNew_sentinel() {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()

	store, err := redisstore.New(rdb, redisstore.WithPrefix("myapp:"))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	// ... use limiter as on a single Redis ...
}
