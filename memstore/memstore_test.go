package memstore_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/storedoc"
	"github.com/keycap/keycap/internal/testhook"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
	"github.com/keycap/keycap/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) func() keycap.Store {
		s := memstore.New() // one process: every "client" shares the store
		return func() keycap.Store { return s }
	})
}

// clock is a hand-moved clock for the store (testhook.MemstoreClock).
type clock struct{ now atomic.Int64 }

func (c *clock) read() time.Duration { return time.Duration(c.now.Load()) }
func (c *clock) add(d time.Duration) { c.now.Add(int64(d)) }
func pool(i int) store.PoolID        { return store.PoolOf(0, "mem", fmt.Sprint(i)) }

// newStore returns a store whose clock is c.
func newStore(c *clock) *memstore.Store {
	return memstore.New(testhook.MemstoreClock(c.read).(memstore.Option))
}

// acquire asks s for a plain slot of p for o, and returns whether it was
// granted (memstore never fails).
func acquire(s *memstore.Store, p store.PoolID, o store.Owner, max int, ttl time.Duration) bool {
	g, _ := s.Acquire(context.Background(), p, o, store.Demand{Max: max, TTL: ttl})
	return g.Granted
}

// release frees o's slot of p.
func release(s *memstore.Store, p store.PoolID, o store.Owner) {
	_, _ = s.Release(context.Background(), p, o, store.Demand{}, false)
}

func TestExpiryByItsOwnClock(t *testing.T) {
	t.Parallel()
	c := &clock{}
	s := newStore(c)
	a := store.NewOwner()
	if !acquire(s, pool(0), a, 1, time.Second) {
		t.Fatal("refused")
	}
	c.add(999 * time.Millisecond)
	if acquire(s, pool(0), store.NewOwner(), 1, time.Second) {
		t.Fatal("granted before the lease expired")
	}
	c.add(time.Millisecond)
	if !acquire(s, pool(0), store.NewOwner(), 1, time.Second) {
		t.Fatal("refused after the lease expired")
	}
}

// TestPinnedHoldsUntilRelease checks a pinned Acquire: the slot outlives any
// TTL on the store's clock, stays pinned through a Renew, is shown with its
// TTL as Expires, and is freed by Release.
func TestPinnedHoldsUntilRelease(t *testing.T) {
	t.Parallel()
	c := &clock{}
	s := newStore(c)
	ctx := context.Background()
	a := store.NewOwner()
	if g, _ := s.Acquire(ctx, pool(0), a, store.Demand{Max: 1, TTL: time.Second, Pinned: true}); !g.Granted {
		t.Fatal("refused")
	}
	for range 2 { // a Renew between the two looks leaves it pinned
		c.add(24 * time.Hour)
		if acquire(s, pool(0), store.NewOwner(), 1, time.Second) {
			t.Fatal("granted while the pinned slot is held")
		}
		page, err := s.InspectPools(ctx, store.PageQuery{Tag: pool(0).Tag()})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Pools) != 1 || len(page.Pools[0].Holders) != 1 || page.Pools[0].Holders[0].Expires != time.Second {
			t.Fatalf("inspected %+v, want one holder expiring in its TTL, 1s", page.Pools)
		}
		batch := []store.Renewal{{Pool: pool(0), Owner: a, TTL: time.Second}}
		if err := s.Renew(ctx, batch); err != nil || batch[0].Lost {
			t.Fatalf("Renew: %v, lost %v", err, batch[0].Lost)
		}
	}
	release(s, pool(0), a)
	if !acquire(s, pool(0), store.NewOwner(), 1, time.Second) {
		t.Fatal("refused after Release")
	}
	// A TTL too long to add to the pinned mark does not wrap around.
	if g, _ := s.Acquire(ctx, pool(1), a, store.Demand{Max: 1, TTL: math.MaxInt64, Pinned: true}); !g.Granted {
		t.Fatal("refused")
	}
	if acquire(s, pool(1), store.NewOwner(), 1, time.Second) {
		t.Fatal("granted beside a pinned slot of a huge TTL: its expiry wrapped around")
	}
}

// TestIdlePoolsAreReclaimed checks that memory follows the pools in use, not
// every key ever seen.
func TestIdlePoolsAreReclaimed(t *testing.T) {
	t.Parallel()
	c := &clock{}
	s := newStore(c)
	const keys = 100_000
	held := store.NewOwner()
	for i := range keys {
		o := store.NewOwner()
		if i < 10 {
			o = held // ten pools stay busy, for a long time
			acquire(s, pool(i), o, 1, time.Hour)
			continue
		}
		acquire(s, pool(i), o, 1, time.Minute)
		if i%2 == 0 {
			release(s, pool(i), o) // half released, half left to expire
		}
	}
	if n := s.Pools(); n != keys {
		t.Fatalf("%d pools before any sweep, want %d", n, keys)
	}
	c.add(2 * time.Minute) // every short lease has expired
	// Using the store sweeps the shards it touches: touch them all.
	for i := range 5000 {
		acquire(s, store.PoolOf(0, "touch", fmt.Sprint(i)), store.NewOwner(), 1, time.Millisecond)
	}
	if n := s.Pools(); n > 5000+10 {
		t.Fatalf("%d pools kept after the sweep; want at most the 10 busy ones and the new ones", n)
	}
	for i := range 10 {
		if acquire(s, pool(i), store.NewOwner(), 1, time.Hour) {
			t.Fatalf("busy pool %d lost its lease in the sweep", i)
		}
	}
}

// TestThousandsOfGoroutines runs 5,000 goroutines on 50 pools of max 4 and
// counts the holders of each pool inside the critical section.
func TestThousandsOfGoroutines(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	l, err := keycap.NewLimiter(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const goroutines, pools, max = 5000, 50, 4
	var inside [pools]atomic.Int32
	var over, granted atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			lim := keycap.Spec{Name: "crowd", Max: max, Wait: time.Minute}.For(fmt.Sprint(g % pools))
			for range 10 {
				ls, err := l.Acquire(context.Background(), lim)
				if err != nil {
					t.Error(err)
					return
				}
				if inside[g%pools].Add(1) > max {
					over.Add(1)
				}
				granted.Add(1)
				runtime.Gosched()
				inside[g%pools].Add(-1)
				ls.Release()
			}
		})
	}
	wg.Wait()
	if over.Load() > 0 {
		t.Fatalf("%d times a pool had more than %d holders", over.Load(), max)
	}
	if granted.Load() != goroutines*10 {
		t.Fatalf("%d grants, want %d (every waiter gets in)", granted.Load(), goroutines*10)
	}
}

// TestDocsListThisStore: the doc of every feature memstore declares lists it,
// and none lists it that it does not declare.
func TestDocsListThisStore(t *testing.T) { storedoc.Check(t, "memstore", memstore.New()) }
