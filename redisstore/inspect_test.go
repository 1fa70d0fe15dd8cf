package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// backends are the topologies the tests and benchmarks that need both run on.
var backends = []struct {
	name   string
	client func(t testing.TB) redis.UniversalClient
}{
	{"redis", func(t testing.TB) redis.UniversalClient { return testenv.Redis(t) }},
	{"cluster", func(t testing.TB) redis.UniversalClient { return testenv.RedisCluster(t) }},
}

// onEachBackend runs test on one Redis and on the cluster, in parallel
// subtests, each with a store of its own prefix.
func onEachBackend(t *testing.T, test func(t *testing.T, c redis.UniversalClient, s *redisstore.Store)) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c := be.client(t)
			test(t, c, newStore(t, c, testenv.Prefix(t, c)))
		})
	}
}

// pages reads every page of tag at the given size, and fails past 10000.
func pages(t *testing.T, s *redisstore.Store, tag store.Tag, size int) (pools []store.PoolState, n int, longest int) {
	t.Helper()
	q := store.PageQuery{Tag: tag, Limit: size}
	for n = 1; ; n++ {
		if n > 10000 {
			t.Fatalf("page size %d: paging did not end after 10000 pages", size)
		}
		page, err := s.InspectPools(context.Background(), q)
		if err != nil {
			t.Fatalf("page size %d, page %d: %v", size, n, err)
		}
		if len(page.Pools) > size {
			t.Fatalf("a page of %d pools, asked for %d", len(page.Pools), size)
		}
		pools = append(pools, page.Pools...)
		longest = max(longest, len(page.Next))
		if page.Next == "" {
			return pools, n, longest
		}
		q.Cursor = page.Next
	}
}

// TestInspectPagesParentsAndCarries: pools of a name among other names'
// pools, some of their keys under two parents, paged at sizes that end
// pages inside one SCAN's keys and inside a parent's keys: every pool is
// shown, with its holders and weights, and a page never carries more than
// a bounded cursor.
func TestInspectPagesParentsAndCarries(t *testing.T) {
	t.Parallel()
	onEachBackend(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := context.Background()
		name := "insp-carry"
		want := map[store.PoolID]int{} // → slots held
		parentHeld := 0
		for i := range 150 {
			p := store.PoolOf(0, name, fmt.Sprint("plain", i))
			if g, err := s.Acquire(ctx, p, store.NewOwner(), store.Demand{Max: 5, TTL: time.Minute}); !g.Granted || err != nil {
				t.Fatal(g.Granted, err)
			}
			want[p] = 1
			if g, err := s.Acquire(ctx, store.PoolOf(0, "insp-other", fmt.Sprint(i)), store.NewOwner(), store.Demand{Max: 5, TTL: time.Minute}); !g.Granted || err != nil {
				t.Fatal(g.Granted, err)
			}
		}
		for _, pn := range []string{"insp-parent-a", "insp-parent-b"} {
			parent := keycap.MustParent(pn, 100)
			for i := range 20 {
				kid := store.PoolOf(0, name, fmt.Sprint(pn, i))
				w := 1 + i%3
				d := store.Demand{Max: 5, TTL: time.Minute, Shared: &store.Shared{Weight: w, Parent: store.Parent{Pool: parent.Pool(), Max: 100, Share: 1}}}
				if g, err := s.Acquire(ctx, kid, store.NewOwner(), d); !g.Granted || err != nil {
					t.Fatal(g.Granted, err)
				}
				want[kid] = w
				parentHeld += w + 1
				// Another name's key under the same parent: not shown.
				other := store.PoolOf(0, "insp-other", fmt.Sprint(pn, i))
				d.Shared = &store.Shared{Weight: 1, Parent: d.Shared.Parent}
				if g, err := s.Acquire(ctx, other, store.NewOwner(), d); !g.Granted || err != nil {
					t.Fatal(g.Granted, err)
				}
			}
		}
		for _, size := range []int{1, 3, 7, 40, 1000} {
			pools, n, longest := pages(t, s, store.TagOf(byte(keycap.FamilyApp), name), size)
			got := map[store.PoolID]int{}
			dup := 0
			for _, p := range pools {
				if _, ok := got[p.Pool]; ok {
					dup++
				}
				got[p.Pool] = p.Held()
			}
			for p, held := range want {
				if got[p] != held {
					t.Fatalf("page size %d: pool %s holds %d, want %d", size, p, got[p], held)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("page size %d: %d pools, want %d", size, len(got), len(want))
			}
			t.Logf("page size %d: %d pages, %d pools shown twice, longest cursor %d bytes", size, n, dup, longest)
			if longest > 4096 {
				t.Fatalf("page size %d: a cursor of %d bytes", size, longest)
			}
		}
		// The parents' own pools, each with every key's leases.
		parents, _, _ := pages(t, s, keycap.MustParent("x", 1).Pool().Tag(), 1)
		if len(parents) != 2 {
			t.Fatalf("%d parents' pools, want 2", len(parents))
		}
		for _, p := range parents {
			if p.Held() != parentHeld/2 || len(p.Holders) != 40 {
				t.Fatalf("parent %s holds %d in %d leases, want %d in 40", p.Pool, p.Held(), len(p.Holders), parentHeld/2)
			}
		}
	})
}

// TestInspectLinesAlone: a pool whose leases lapsed while its line waits,
// and a parent's key whose only entry is a ticket, are shown, once.
func TestInspectLinesAlone(t *testing.T) {
	t.Parallel()
	onEachBackend(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := context.Background()
		name := "insp-alone"
		tk := store.Ticket{TTL: time.Minute, Claim: time.Minute}
		p := store.PoolOf(0, name, "plain")
		// Leases of a second: long enough to be held when the waiters
		// queue on a loaded machine, short enough to lapse soon after.
		if g, err := s.Acquire(ctx, p, store.NewOwner(), store.Demand{Max: 1, TTL: time.Second}); !g.Granted || err != nil {
			t.Fatal(g.Granted, err)
		}
		waiter := store.NewOwner()
		if g, err := s.Acquire(ctx, p, waiter, store.Demand{Max: 1, TTL: time.Minute, Line: tk}); g.Granted || err != nil {
			t.Fatal(g.Granted, err)
		}
		parent := keycap.MustParent("insp-alone-parent", 1)
		kid := store.PoolOf(0, name, "kid")
		d := store.Demand{Max: 1, TTL: time.Second, Shared: &store.Shared{Weight: 1, Parent: store.Parent{Pool: parent.Pool(), Max: 1, Share: 1}}}
		if g, err := s.Acquire(ctx, kid, store.NewOwner(), d); !g.Granted || err != nil {
			t.Fatal(g.Granted, err)
		}
		kidWaiter := store.NewOwner()
		d.TTL, d.Line = time.Minute, tk
		if g, err := s.Acquire(ctx, kid, kidWaiter, d); g.Granted || err != nil {
			t.Fatal(g.Granted, err)
		}
		leases, _, _, _ := s.ShareKeys(parent.Pool())
		deadline := time.Now().Add(5 * time.Second)
		for { // the leases' keys expire with them
			n1, err1 := c.Exists(ctx, s.Key(p)).Result()
			n2, err2 := c.Exists(ctx, leases).Result()
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if n1+n2 == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the lapsed leases' keys are still there after 5s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, size := range []int{1, 10} {
			pools, _, _ := pages(t, s, p.Tag(), size)
			if len(pools) != 2 {
				t.Fatalf("page size %d: %+v, want the two waiting pools", size, pools)
			}
			for _, st := range pools {
				w := map[store.PoolID]store.Owner{p: waiter, kid: kidWaiter}[st.Pool]
				if len(st.Holders) != 0 || len(st.Waiting) != 1 || st.Waiting[0].Owner != w || st.Waiting[0].Expires <= 0 {
					t.Fatalf("pool %s: %+v, want its one waiter", st.Pool, st)
				}
			}
		}
	})
}

// TestInspectPausesPage: pauses and paces of one tag over several pages.
func TestInspectPausesPage(t *testing.T) {
	t.Parallel()
	onEachBackend(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := context.Background()
		want := map[string]bool{}
		for i := range 30 {
			id := store.PoolOf(byte(keycap.FamilyPause), "insp-pauses", fmt.Sprint(i))
			if _, err := s.Pause(ctx, id, time.Minute); err != nil {
				t.Fatal(err)
			}
			want[id.String()+"/pause"] = true
			if i%2 == 0 {
				if _, err := s.Pace(ctx, id, store.Rate{Events: 1, Period: time.Minute, Burst: 1}); err != nil {
					t.Fatal(err)
				}
				want[id.String()+"/pace"] = true
			}
		}
		tag := store.TagOf(byte(keycap.FamilyPause), "insp-pauses")
		for _, size := range []int{1, 4, 100} {
			got := map[string]bool{}
			q := store.PageQuery{Tag: tag, Limit: size}
			for n := 0; ; n++ {
				if n > 1000 {
					t.Fatal("paging did not end")
				}
				page, err := s.InspectPauses(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Pauses) > size {
					t.Fatalf("a page of %d, asked for %d", len(page.Pauses), size)
				}
				for _, p := range page.Pauses {
					kind := "pause"
					if p.Pace {
						kind = "pace"
					}
					if p.Left <= 0 || p.Left > time.Minute {
						t.Fatalf("%s of %s: %s left", kind, p.ID, p.Left)
					}
					got[p.ID.String()+"/"+kind] = true
				}
				if page.Next == "" {
					break
				}
				q.Cursor = page.Next
			}
			if len(got) != len(want) {
				t.Fatalf("page size %d: %d pauses and paces, want %d", size, len(got), len(want))
			}
		}
	})
}

// TestInspectRefusesOthersCursors: a cursor altered, or of another tag or
// kind of page, is refused.
func TestInspectRefusesOthersCursors(t *testing.T) {
	c := testenv.Redis(t)
	s := newStore(t, c, testenv.Prefix(t, c))
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Acquire(ctx, store.PoolOf(0, "insp-cursor", fmt.Sprint(i)), store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	tag := store.TagOf(byte(keycap.FamilyApp), "insp-cursor")
	page, err := s.InspectPools(ctx, store.PageQuery{Tag: tag, Limit: 1})
	if err != nil || page.Next == "" {
		t.Fatalf("first page: %+v, %v; want a next one", page, err)
	}
	if _, err := s.InspectPools(ctx, store.PageQuery{Tag: tag, Limit: 1, Cursor: page.Next}); err != nil {
		t.Fatalf("its own cursor: %v", err)
	}
	altered := []byte(page.Next)
	altered[len(altered)/2] ^= 1
	for what, q := range map[string]store.PageQuery{
		"altered":      {Tag: tag, Cursor: string(altered)},
		"another tag":  {Tag: store.TagOf(byte(keycap.FamilyApp), "insp-other"), Cursor: page.Next},
		"garbage":      {Tag: tag, Cursor: "p.1.2.3"},
		"dots":         {Tag: tag, Cursor: strings.Repeat(".", 40)},
		"its checksum": {Tag: tag, Cursor: page.Next[:strings.LastIndexByte(page.Next, '.')] + ".00000000"},
	} {
		if _, err := s.InspectPools(ctx, q); err == nil {
			t.Errorf("%s cursor accepted", what)
		}
	}
	if _, err := s.InspectPauses(ctx, store.PageQuery{Tag: tag, Cursor: page.Next}); err == nil {
		t.Error("a cursor of pools accepted for pauses")
	}
}

// TestInspectAfterScriptFlush: a Redis that lost its scripts is inspected
// at once.
func TestInspectAfterScriptFlush(t *testing.T) {
	c := testenv.Redis(t)
	s := newStore(t, c, testenv.Prefix(t, c))
	ctx := context.Background()
	p := store.PoolOf(0, "insp-flush", "k")
	if _, err := s.Acquire(ctx, p, store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	page, err := s.InspectPools(ctx, store.PageQuery{Tag: p.Tag()})
	if err != nil || len(page.Pools) != 1 {
		t.Fatalf("after a flush: %+v, %v", page, err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.SetOverride(ctx, store.Override{Name: "n", Max: 1, Pool: p}); err != nil {
		t.Fatal(err)
	}
}

// TestOverridesKeepAnyBytes: names and keys of any bytes, the separator
// included, the shadow family, and a TTL read back as the time left; the
// two keys on one slot.
func TestOverridesKeepAnyBytes(t *testing.T) {
	t.Parallel()
	onEachBackend(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := context.Background()
		o := store.Override{Family: byte(keycap.FamilyConn | 0x80), Name: "5|x|\x00|", Key: "|\xff\x00é|", Max: keycap.KeepMax, Share: 7, TTL: time.Minute}
		o.Pool = store.PoolOf(o.Family, o.Name, o.Key)
		if err := s.SetOverride(ctx, o); err != nil {
			t.Fatal(err)
		}
		v, list, err := s.Overrides(ctx, 0)
		if err != nil || v == 0 || len(list) != 1 {
			t.Fatalf("Overrides: %d, %+v, %v", v, list, err)
		}
		got := list[0]
		if got.TTL <= 0 || got.TTL > time.Minute {
			t.Fatalf("TTL %s, want the time left of 1m", got.TTL)
		}
		got.TTL = o.TTL
		if got != o {
			t.Fatalf("read back %+v, want %+v", got, o)
		}
		if v2, list, err := s.Overrides(ctx, v); err != nil || v2 != v || list != nil {
			t.Fatalf("unchanged: %d, %+v, %v", v2, list, err)
		}
		if err := s.DeleteOverride(ctx, store.PoolOf(0, "never", "set")); err != nil {
			t.Fatal(err)
		}
		if v2, _, err := s.Overrides(ctx, v); err != nil || v2 != v {
			t.Fatalf("deleting what was never set moved the version: %d → %d, %v", v, v2, err)
		}
		set, version := s.OverrideKeys()
		if _, cluster := c.(*redis.ClusterClient); cluster && c.ClusterKeySlot(ctx, set).Val() != c.ClusterKeySlot(ctx, version).Val() {
			t.Fatal("the overrides' keys are on two slots")
		}
	})
}

// TestInspectRing: a ring's shards are walked too (here a ring of one).
func TestInspectRing(t *testing.T) {
	testenv.Redis(t) // skips without Redis
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": testenv.RedisAddr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })
	s := newStore(t, ring, testenv.Prefix(t, testenv.Redis(t)))
	ctx := context.Background()
	for i := range 3 {
		if g, err := s.Acquire(ctx, store.PoolOf(0, "insp-ring", fmt.Sprint(i)), store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute}); !g.Granted || err != nil {
			t.Fatal(g.Granted, err)
		}
	}
	if pools, _, _ := pages(t, s, store.TagOf(byte(keycap.FamilyApp), "insp-ring"), 2); len(pools) != 3 {
		t.Fatalf("%d pools, want 3", len(pools))
	}
}

// TestInspectRoundTrips: a page costs its SCANs and one round trip per
// node for the reads, whatever the number of pools read.
func TestInspectRoundTrips(t *testing.T) {
	t.Parallel()
	onEachBackend(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := context.Background()
		name := "insp-rt"
		parent := keycap.MustParent("insp-rt", 10).Pool()
		for i := range 30 {
			p := store.PoolOf(0, name, fmt.Sprint(i))
			if g, err := s.Acquire(ctx, p, store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute}); !g.Granted || err != nil {
				t.Fatal(g.Granted, err)
			}
			if i < 5 {
				d := store.Demand{Max: 1, TTL: time.Minute, Shared: &store.Shared{Weight: 1, Parent: store.Parent{Pool: parent, Max: 10, Share: 1}}}
				if g, err := s.Acquire(ctx, store.PoolOf(0, name, fmt.Sprint("kid", i)), store.NewOwner(), d); !g.Granted || err != nil {
					t.Fatal(g.Granted, err)
				}
			}
		}
		tag := store.TagOf(byte(keycap.FamilyApp), name)
		pages(t, s, tag, 1000) // warm up: scripts, connections, slots
		nodes := 1
		if cc, ok := c.(*redis.ClusterClient); ok {
			var masters atomic.Int64
			_ = cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { masters.Add(1); return nil })
			nodes = int(masters.Load())
		}
		calls := countScans(c)
		pools, n, _ := pages(t, s, tag, 1000)
		if len(pools) != 35 {
			t.Fatalf("%d pools, want 35", len(pools))
		}
		reads := calls.others.Load()
		t.Logf("%d pages: %d SCANs, %d round trips of reads on %d nodes", n, calls.n.Load(), reads, nodes)
		if reads > int64(n*nodes) {
			t.Fatalf("%d round trips of reads in %d pages on %d nodes, want at most one per page and node", reads, n, nodes)
		}
	})
}

// TestOverridesVersionAfterLoss: a Redis that lost the overrides and their
// version does not hand out again the version a client holds.
func TestOverridesVersionAfterLoss(t *testing.T) {
	c := testenv.Redis(t)
	s := newStore(t, c, testenv.Prefix(t, c))
	ctx := context.Background()
	o := store.Override{Name: "n", Key: "a", Max: 1, Pool: store.PoolOf(0, "n", "a")}
	if err := s.SetOverride(ctx, o); err != nil {
		t.Fatal(err)
	}
	v, _, err := s.Overrides(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	set, version := s.OverrideKeys()
	if err := c.Del(ctx, set, version).Err(); err != nil {
		t.Fatal(err)
	}
	o.Key, o.Pool = "b", store.PoolOf(0, "n", "b")
	if err := s.SetOverride(ctx, o); err != nil {
		t.Fatal(err)
	}
	v2, list, err := s.Overrides(ctx, v)
	if err != nil || v2 == v || len(list) != 1 || list[0].Key != "b" {
		t.Fatalf("after the loss and a new set: version %d (held %d), %+v, %v", v2, v, list, err)
	}
}
