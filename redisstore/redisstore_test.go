package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/storedoc"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/storetest"
)

func newStore(t testing.TB, c redis.UniversalClient, prefix string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformanceRedis(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) func() keycap.Store {
		prefix := testenv.Prefix(t, testenv.Redis(t))
		// Each store has a client of its own: independent connections, as
		// separate processes would have.
		return func() keycap.Store { return newStore(t, testenv.Redis(t), prefix) }
	})
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) func() keycap.Store {
		prefix := testenv.Prefix(t, testenv.RedisCluster(t))
		return func() keycap.Store { return newStore(t, testenv.RedisCluster(t), prefix) }
	})
}

func TestConformanceSentinel(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) func() keycap.Store {
		prefix := testenv.Prefix(t, testenv.RedisSentinel(t))
		return func() keycap.Store { return newStore(t, testenv.RedisSentinel(t), prefix) }
	})
}

func TestNewRejectsBadPrefix(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	for _, p := range []string{"a{b", "}", "{x}"} {
		if _, err := redisstore.New(c, redisstore.WithPrefix(p)); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
	if _, err := redisstore.New(nil); err == nil {
		t.Error("nil client accepted")
	}
}

// TestOneRoundTripPerOperation counts, with a go-redis hook, the round trips
// of each operation for several values of max: always one.
func TestOneRoundTripPerOperation(t *testing.T) {
	t.Parallel()
	for _, backend := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"redis", func(t *testing.T) redis.UniversalClient { return testenv.Redis(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return testenv.RedisCluster(t) }},
	} {
		t.Run(backend.name, func(t *testing.T) {
			c := backend.client(t)
			s := newStore(t, c, testenv.Prefix(t, c))
			ctx := context.Background()
			// Warm up: load the scripts, open connections.
			p0, o0 := keycap.NewPoolID("rt", "warm"), keycap.NewOwner()
			if _, err := s.Acquire(ctx, p0, o0, 1, time.Second); err != nil {
				t.Fatal(err)
			}
			if err := s.Renew(ctx, []keycap.Renewal{{Pool: p0, Owner: o0, TTL: time.Second}}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Queue(ctx, p0, keycap.NewOwner(), 1, time.Second, keycap.Ticket{TTL: time.Second, Claim: time.Second}); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, p0, o0); err != nil {
				t.Fatal(err)
			}
			// ...and share.lua, on the parent's node.
			warm := keycap.Demand{Pool: p0, Owner: o0, Max: 1, TTL: time.Second, Weight: 1, Parent: keycap.MustParent("rt", 4).Pool(), ParentMax: 4, Share: 1}
			if _, _, err := s.AcquireDemand(ctx, warm, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ReleaseDemand(ctx, warm, false); err != nil {
				t.Fatal(err)
			}
			rt := testenv.CountRoundTrips(c)
			measureN := func(what string, max, want int, fn func()) {
				t.Helper()
				before := rt.Load()
				fn()
				if n := rt.Load() - before; n != int64(want) {
					t.Errorf("max %d: %s took %d round trips, want %d", max, what, n, want)
				}
			}
			measure := func(what string, max int, fn func()) { t.Helper(); measureN(what, max, 1, fn) }
			for _, max := range []int{1, 5, 20, 100} {
				p := keycap.NewPoolID("rt", fmt.Sprint(max))
				owners := make([]keycap.Owner, max)
				for i := range owners {
					owners[i] = keycap.NewOwner()
					measure("acquire", max, func() {
						if ok, err := s.Acquire(ctx, p, owners[i], max, time.Minute); !ok || err != nil {
							t.Fatalf("acquire %d: %v %v", i, ok, err)
						}
					})
				}
				measure("reject", max, func() {
					if ok, err := s.Acquire(ctx, p, keycap.NewOwner(), max, time.Minute); ok || err != nil {
						t.Fatalf("reject: %v %v", ok, err)
					}
				})
				batch := make([]keycap.Renewal, max)
				for i := range batch {
					batch[i] = keycap.Renewal{Pool: p, Owner: owners[i], TTL: time.Minute}
				}
				measure(fmt.Sprintf("renew of %d leases", max), max, func() {
					if err := s.Renew(ctx, batch); err != nil {
						t.Fatal(err)
					}
				})
				// Waiting: a refusal takes a ticket in the same round trip, a
				// release hands the slot to it, and the waiter claims it.
				w, tk := keycap.NewOwner(), keycap.Ticket{TTL: time.Minute, Claim: time.Minute}
				measure("queue (refused: a ticket)", max, func() {
					if ok, _, err := s.Queue(ctx, p, w, max, time.Minute, tk); ok || err != nil {
						t.Fatalf("queue: %v %v", ok, err)
					}
				})
				measureN("release (handed to the ticket)", max, 2, func() {
					if err := s.Release(ctx, p, owners[0]); err != nil {
						t.Fatal(err)
					}
				})
				measure("queue (claims the handoff)", max, func() {
					if ok, _, err := s.Queue(ctx, p, w, max, time.Minute, tk); !ok || err != nil {
						t.Fatalf("claim: %v %v", ok, err)
					}
				})
				owners[0] = w
				w2 := keycap.NewOwner()
				if ok, _, err := s.Queue(ctx, p, w2, max, time.Minute, tk); ok || err != nil {
					t.Fatalf("queue: %v %v", ok, err)
				}
				measure("dequeue", max, func() {
					if err := s.Dequeue(ctx, p, w2); err != nil {
						t.Fatal(err)
					}
				})
				for i := range owners {
					measure("release", max, func() {
						if err := s.Release(ctx, p, owners[i]); err != nil {
							t.Fatal(err)
						}
					})
				}
			}
			// Weights and parents: every decision one round trip too.
			parent := keycap.MustParent("rt", 4).Pool()
			d := func(key string, max, weight int) keycap.Demand {
				return keycap.Demand{Pool: keycap.NewPoolID("rt-kid", key), Owner: keycap.NewOwner(), Max: max, TTL: time.Minute, Weight: weight,
					Parent: parent, ParentMax: 4, Share: 1, Keep: time.Minute}
			}
			take := func(what string, dm keycap.Demand, tk *keycap.Ticket, want bool) {
				t.Helper()
				measure(what, dm.Max, func() {
					if ok, _, err := s.AcquireDemand(ctx, dm, tk); ok != want || err != nil {
						t.Fatalf("%s: %v %v", what, ok, err)
					}
				})
			}
			give := func(what string, dm keycap.Demand) {
				t.Helper()
				measure(what, dm.Max, func() {
					if _, err := s.ReleaseDemand(ctx, dm, false); err != nil {
						t.Fatal(err)
					}
				})
			}
			weighted := keycap.Demand{Pool: keycap.NewPoolID("rt", "weighted"), Owner: keycap.NewOwner(), Max: 4, TTL: time.Minute, Weight: 3}
			take("weighted acquire", weighted, nil, true)
			measure("weighted renewal", 4, func() {
				if err := s.Renew(ctx, []keycap.Renewal{{Pool: weighted.Pool, Owner: weighted.Owner, TTL: time.Minute, Weight: 3}}); err != nil {
					t.Fatal(err)
				}
			})
			give("weighted release", weighted)
			heavy, light := d("heavy", 4, 3), d("light", 4, 1)
			take("acquire with a parent", heavy, nil, true)
			take("acquire with a parent", light, nil, true)
			waiter := d("heavy", 4, 1)
			take("refusal with a parent (a ticket)", waiter, &keycap.Ticket{TTL: time.Minute, Claim: time.Minute}, false)
			give("release with a parent (kept for its key)", light)
			take("the key's next caller takes the kept slot", d("light", 4, 1), nil, true)
			measure("renewal with a parent", 4, func() {
				if err := s.Renew(ctx, []keycap.Renewal{{Pool: heavy.Pool, Owner: heavy.Owner, TTL: time.Minute, Weight: 3, Parent: parent}}); err != nil {
					t.Fatal(err)
				}
			})
			give("release with a parent (handed to the line)", heavy)
		})
	}
}

// TestScriptCacheFlushed checks that a Redis that lost its scripts (restart,
// SCRIPT FLUSH) is served again at once: acquire falls back to EVAL, renew
// loads the script and retries.
func TestScriptCacheFlushed(t *testing.T) {
	c := testenv.Redis(t)
	s := newStore(t, c, testenv.Prefix(t, c))
	ctx := context.Background()
	p, o := keycap.NewPoolID("flush", "k"), keycap.NewOwner()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Acquire(ctx, p, o, 1, time.Minute); !ok || err != nil {
		t.Fatalf("acquire after flush: %v %v", ok, err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	batch := []keycap.Renewal{{Pool: p, Owner: o, TTL: time.Minute}}
	if err := s.Renew(ctx, batch); err != nil || batch[0].Err != nil || batch[0].Lost {
		t.Fatalf("renew after flush: %v %+v", err, batch[0])
	}
}

// TestIdlePoolLeavesNoKey checks that a pool's key expires with its last lease
// and disappears with its last release.
func TestIdlePoolLeavesNoKey(t *testing.T) {
	c := testenv.Redis(t)
	s := newStore(t, c, testenv.Prefix(t, c))
	ctx := context.Background()
	p, o := keycap.NewPoolID("idle", "k"), keycap.NewOwner()
	if _, err := s.Acquire(ctx, p, o, 3, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	pttl, err := c.PTTL(ctx, s.Key(p)).Result()
	if err != nil || pttl <= 0 || pttl > 5*time.Second {
		t.Fatalf("PTTL = %v, %v: want the lease's TTL", pttl, err)
	}
	if err := s.Release(ctx, p, o); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, s.Key(p)).Result(); err != nil || n != 0 {
		t.Fatalf("key still exists after the last release: %d %v", n, err)
	}
	// A node's heartbeat that finds none of its members left (a user's
	// connections all gone) deletes the key too.
	node := keycap.NewNodeID("n")
	if _, err := s.Acquire(ctx, p, keycap.NodeOwner(node, "c1"), 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, node, time.Minute, []keycap.SyncPool{{Pool: p}}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, s.Key(p)).Result(); err != nil || n != 0 {
		t.Fatalf("key still exists after a sync emptied the pool: %d %v", n, err)
	}
}

// TestDocsListThisStore: every keycap interface redisstore implements lists
// it in its doc, and none lists it that it does not implement.
func TestDocsListThisStore(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never dialled
	defer c.Close()
	storedoc.Check(t, "redisstore", newStore(t, c, ""))
}
