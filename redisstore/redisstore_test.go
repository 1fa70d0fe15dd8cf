package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/storedoc"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
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

// TestConformanceRedisScripts runs the line's decisions as scripts
// (EVALSHA), as on Redis before 7, where TestConformanceRedis runs them as
// functions.
func TestConformanceRedisScripts(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) func() keycap.Store {
		prefix := testenv.Prefix(t, testenv.Redis(t))
		return func() keycap.Store {
			s := newStore(t, testenv.Redis(t), prefix)
			s.UseScripts()
			return s
		}
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
			p0, o0 := store.PoolOf(0, "rt", "warm"), store.NewOwner()
			if _, err := s.Acquire(ctx, p0, o0, store.Demand{Max: 1, TTL: time.Second}); err != nil {
				t.Fatal(err)
			}
			if err := s.Renew(ctx, []store.Renewal{{Pool: p0, Owner: o0, TTL: time.Second}}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Acquire(ctx, p0, store.NewOwner(), store.Demand{Max: 1, TTL: time.Second, Line: store.Ticket{TTL: time.Second, Claim: time.Second}}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Release(ctx, p0, o0, store.Demand{}, false); err != nil {
				t.Fatal(err)
			}
			// ...and share.lua, on the parent's node.
			warm := store.Demand{Max: 1, TTL: time.Second, Shared: &store.Shared{Weight: 1, Parent: store.Parent{Pool: keycap.MustParent("rt", 4).Pool(), Max: 4, Share: 1}}}
			if _, err := s.Acquire(ctx, p0, o0, warm); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Release(ctx, p0, o0, warm, false); err != nil {
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
				p := store.PoolOf(0, "rt", fmt.Sprint(max))
				owners := make([]store.Owner, max)
				for i := range owners {
					owners[i] = store.NewOwner()
					measure("acquire", max, func() {
						if g, err := s.Acquire(ctx, p, owners[i], store.Demand{Max: max, TTL: time.Minute}); !g.Granted || err != nil {
							t.Fatalf("acquire %d: %v %v", i, g.Granted, err)
						}
					})
				}
				measure("reject", max, func() {
					if g, err := s.Acquire(ctx, p, store.NewOwner(), store.Demand{Max: max, TTL: time.Minute}); g.Granted || err != nil {
						t.Fatalf("reject: %v %v", g.Granted, err)
					}
				})
				batch := make([]store.Renewal, max)
				for i := range batch {
					batch[i] = store.Renewal{Pool: p, Owner: owners[i], TTL: time.Minute}
				}
				measure(fmt.Sprintf("renew of %d leases", max), max, func() {
					if err := s.Renew(ctx, batch); err != nil {
						t.Fatal(err)
					}
				})
				// Waiting: a refusal takes a ticket in the same round trip, a
				// release hands the slot to it, and the waiter claims it.
				w, tk := store.NewOwner(), store.Ticket{TTL: time.Minute, Claim: time.Minute}
				measure("queue (refused: a ticket)", max, func() {
					if g, err := s.Acquire(ctx, p, w, store.Demand{Max: max, TTL: time.Minute, Line: tk}); g.Granted || err != nil {
						t.Fatalf("queue: %v %v", g.Granted, err)
					}
				})
				measureN("release (handed to the ticket)", max, 2, func() {
					if _, err := s.Release(ctx, p, owners[0], store.Demand{}, false); err != nil {
						t.Fatal(err)
					}
				})
				measure("queue (claims the handoff)", max, func() {
					if g, err := s.Acquire(ctx, p, w, store.Demand{Max: max, TTL: time.Minute, Line: tk}); !g.Granted || err != nil {
						t.Fatalf("claim: %v %v", g.Granted, err)
					}
				})
				owners[0] = w
				w2 := store.NewOwner()
				if g, err := s.Acquire(ctx, p, w2, store.Demand{Max: max, TTL: time.Minute, Line: tk}); g.Granted || err != nil {
					t.Fatalf("queue: %v %v", g.Granted, err)
				}
				measure("dequeue", max, func() {
					if _, err := s.Release(ctx, p, w2, store.Demand{}, true); err != nil {
						t.Fatal(err)
					}
				})
				for i := range owners {
					measure("release", max, func() {
						if _, err := s.Release(ctx, p, owners[i], store.Demand{}, false); err != nil {
							t.Fatal(err)
						}
					})
				}
			}
			// Weights and parents: every decision one round trip too.
			parent := keycap.MustParent("rt", 4).Pool()
			// lease is a demand with the pool and the owner it is made for.
			type lease struct {
				pool  store.PoolID
				owner store.Owner
				d     store.Demand
			}
			d := func(key string, max, weight int) lease {
				return lease{store.PoolOf(0, "rt-kid", key), store.NewOwner(), store.Demand{Max: max, TTL: time.Minute, Shared: &store.Shared{Weight: weight,
					Parent: store.Parent{Pool: parent, Max: 4, Share: 1, Keep: time.Minute}}}}
			}
			take := func(what string, l lease, want bool) {
				t.Helper()
				measure(what, l.d.Max, func() {
					if g, err := s.Acquire(ctx, l.pool, l.owner, l.d); g.Granted != want || err != nil {
						t.Fatalf("%s: %v %v", what, g.Granted, err)
					}
				})
			}
			give := func(what string, l lease) {
				t.Helper()
				measure(what, l.d.Max, func() {
					if _, err := s.Release(ctx, l.pool, l.owner, l.d, false); err != nil {
						t.Fatal(err)
					}
				})
			}
			weighted := lease{store.PoolOf(0, "rt", "weighted"), store.NewOwner(), store.Demand{Max: 4, TTL: time.Minute, Shared: &store.Shared{Weight: 3}}}
			take("weighted acquire", weighted, true)
			measure("weighted renewal", 4, func() {
				if err := s.Renew(ctx, []store.Renewal{{Pool: weighted.pool, Owner: weighted.owner, TTL: time.Minute, Weight: 3}}); err != nil {
					t.Fatal(err)
				}
			})
			give("weighted release", weighted)
			heavy, light := d("heavy", 4, 3), d("light", 4, 1)
			take("acquire with a parent", heavy, true)
			take("acquire with a parent", light, true)
			waiter := d("heavy", 4, 1)
			waiter.d.Line = store.Ticket{TTL: time.Minute, Claim: time.Minute}
			take("refusal with a parent (a ticket)", waiter, false)
			give("release with a parent (kept for its key)", light)
			take("the key's next caller takes the kept slot", d("light", 4, 1), true)
			measure("renewal with a parent", 4, func() {
				if err := s.Renew(ctx, []store.Renewal{{Pool: heavy.pool, Owner: heavy.owner, TTL: time.Minute, Weight: 3, Parent: parent}}); err != nil {
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
	p, o := store.PoolOf(0, "flush", "k"), store.NewOwner()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if g, err := s.Acquire(ctx, p, o, store.Demand{Max: 1, TTL: time.Minute}); !g.Granted || err != nil {
		t.Fatalf("acquire after flush: %v %v", g.Granted, err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	batch := []store.Renewal{{Pool: p, Owner: o, TTL: time.Minute}}
	if err := s.Renew(ctx, batch); err != nil || batch[0].Err != nil || batch[0].Lost {
		t.Fatalf("renew after flush: %v %+v", err, batch[0])
	}
}

// TestLineRunsAsFunctions checks that a plain pool's decisions run as the
// functions of the store's library on Redis 7, and are served again at once
// when Redis lost them (FUNCTION DELETE, as a restart without persistence
// does); and that a store whose user may not run functions (an ACL without
// FCALL and FUNCTION) runs them as scripts from its first call.
func TestLineRunsAsFunctions(t *testing.T) {
	c := testenv.Redis(t)
	ctx := context.Background()
	pair := func(s *redisstore.Store, name string) {
		t.Helper()
		p, o := store.PoolOf(0, "functions", name), store.NewOwner()
		if g, err := s.Acquire(ctx, p, o, store.Demand{Max: 1, TTL: time.Minute}); !g.Granted || err != nil {
			t.Fatalf("%s: acquire: %v %v", name, g.Granted, err)
		}
		if g, err := s.Acquire(ctx, p, store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute, Line: store.Ticket{TTL: time.Second, Claim: time.Second}}); g.Granted || err != nil {
			t.Fatalf("%s: queue on a full pool: %v %v", name, g.Granted, err)
		}
		if _, err := s.Release(ctx, p, o, store.Demand{}, false); err != nil {
			t.Fatalf("%s: release: %v", name, err)
		}
	}
	loaded := func() bool {
		t.Helper()
		libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisstore.Library}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(libs) == 1 && len(libs[0].Functions) == 4
	}
	s := newStore(t, c, testenv.Prefix(t, c))
	pair(s, "first") // loads the library
	if !s.RunsFunctions() || !loaded() {
		t.Fatalf("after a first call: functions %v, library %s loaded %v", s.RunsFunctions(), redisstore.Library, loaded())
	}
	if err := c.FunctionDelete(ctx, redisstore.Library).Err(); err != nil {
		t.Fatal(err)
	}
	pair(s, "deleted")
	if !s.RunsFunctions() || !loaded() {
		t.Fatalf("after the library was deleted: functions %v, loaded again %v", s.RunsFunctions(), loaded())
	}

	user := "keycap-test-" + store.NewOwner().String()[:12]
	if err := c.Do(ctx, "ACL", "SETUSER", user, "on", "nopass", "~*", "&*", "+@all", "-fcall", "-fcall_ro", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Do(context.Background(), "ACL", "DELUSER", user) })
	opt := *c.Options()
	opt.Username, opt.Password = user, "any" // nopass: any password
	limited := redis.NewClient(&opt)
	t.Cleanup(func() { _ = limited.Close() })
	scripts := newStore(t, limited, testenv.Prefix(t, c))
	pair(scripts, "no functions")
	if scripts.RunsFunctions() {
		t.Fatal("a store whose user may not run functions still runs them")
	}
}

// TestIdlePoolLeavesNoKey checks that a pool's key expires with its last lease
// and disappears with its last release.
func TestIdlePoolLeavesNoKey(t *testing.T) {
	c := testenv.Redis(t)
	s := newStore(t, c, testenv.Prefix(t, c))
	ctx := context.Background()
	p, o := store.PoolOf(0, "idle", "k"), store.NewOwner()
	if _, err := s.Acquire(ctx, p, o, store.Demand{Max: 3, TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	pttl, err := c.PTTL(ctx, s.Key(p)).Result()
	if err != nil || pttl <= 0 || pttl > 5*time.Second {
		t.Fatalf("PTTL = %v, %v: want the lease's TTL", pttl, err)
	}
	if _, err := s.Release(ctx, p, o, store.Demand{}, false); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, s.Key(p)).Result(); err != nil || n != 0 {
		t.Fatalf("key still exists after the last release: %d %v", n, err)
	}
	// A node's heartbeat that finds none of its members left (a user's
	// connections all gone) deletes the key too.
	node := store.NodeOf("n")
	if _, err := s.Acquire(ctx, p, store.MemberOf(node, "c1"), store.Demand{Max: 3, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, node, time.Minute, []store.SyncPool{{Pool: p}}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, s.Key(p)).Result(); err != nil || n != 0 {
		t.Fatalf("key still exists after a sync emptied the pool: %d %v", n, err)
	}
}

// TestDocsListThisStore: every store feature redisstore declares lists it
// in its doc, and none lists it that it does not declare. A store on a
// cluster declares them all (Partitions only there: TestFeatures).
func TestDocsListThisStore(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}) // never answers
	defer c.Close()
	storedoc.Check(t, "redisstore", newStore(t, c, ""))
}

// TestFeatures: redisstore declares every feature but Pinned, Partitions
// only on a cluster (whose slot ranges fail alone), and refuses a pinned
// demand with ErrNotSupported, before any call to Redis.
func TestFeatures(t *testing.T) {
	const all = store.Lines | store.Notifications | store.Shares | store.AsyncRelease | store.Members |
		store.Marks | store.Pauses | store.Paces | store.Inspection | store.Overrides | store.Fences | store.Totals
	nowhere := []string{"127.0.0.1:1"} // never answers: a call to Redis fails with a dial error
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   store.Features
	}{
		{"redis", redis.NewClient(&redis.Options{Addr: nowhere[0], ContextTimeoutEnabled: true}), all},
		{"sentinel", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: nowhere, ContextTimeoutEnabled: true}), all},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": nowhere[0]}, ContextTimeoutEnabled: true}), all},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: nowhere, ContextTimeoutEnabled: true}), all | store.Partitions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.client.Close()
			s := newStore(t, tc.client, "")
			f := s.Features()
			if f != tc.want {
				t.Errorf("Features() = %s, want %s", f, tc.want)
			}
			if f.Has(store.Pinned) {
				t.Error("redisstore declares Pinned")
			}
			if got, want := f.Has(store.Partitions), tc.name == "cluster"; got != want {
				t.Errorf("Features().Has(Partitions) = %v, want %v", got, want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			pool := store.PoolOf(0, "pinned", tc.name)
			for _, d := range []store.Demand{
				{Max: 1, TTL: time.Minute, Pinned: true},
				{Max: 4, TTL: time.Minute, Shared: &store.Shared{Weight: 2}, Pinned: true},
				{Max: 1, TTL: time.Minute, Line: store.Ticket{TTL: time.Minute, Claim: time.Minute}, Pinned: true},
			} {
				g, err := s.Acquire(ctx, pool, store.NewOwner(), d)
				if !errors.Is(err, store.ErrNotSupported) || !errors.Is(err, keycap.ErrNotSupported) || g.Granted {
					t.Fatalf("Acquire of a pinned demand (weight %d, line %v) = %+v, %v; want an error matching ErrNotSupported", d.Weight(), d.Line, g, err)
				}
				var nse *store.NotSupportedError
				if !errors.As(err, &nse) || nse.Feature != store.Pinned {
					t.Fatalf("Acquire of a pinned demand: %v (%T), want a *store.NotSupportedError for Pinned", err, err)
				}
			}
		})
	}
}

// TestPinnedTakesNoSlot: a pinned demand, refused, makes no round trip and
// leaves its pool as it was.
func TestPinnedTakesNoSlot(t *testing.T) {
	c := testenv.Redis(t)
	s := newStore(t, c, testenv.Prefix(t, c))
	ctx := context.Background()
	p := store.PoolOf(0, "pinned", "k")
	rt := testenv.CountRoundTrips(c)
	if g, err := s.Acquire(ctx, p, store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute, Pinned: true}); g.Granted || !errors.Is(err, store.ErrNotSupported) {
		t.Fatalf("Acquire of a pinned demand = %+v, %v; want ErrNotSupported", g, err)
	}
	if n := rt.Load(); n != 0 {
		t.Fatalf("the refused pinned demand made %d round trips, want 0", n)
	}
	if n, err := c.Exists(ctx, s.Key(p)).Result(); err != nil || n != 0 {
		t.Fatalf("the refused pinned demand left a key: %d %v", n, err)
	}
	if g, err := s.Acquire(ctx, p, store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute}); !g.Granted || err != nil {
		t.Fatalf("Acquire after the refused pinned demand = %+v, %v; want the pool's one slot", g, err)
	}
}
