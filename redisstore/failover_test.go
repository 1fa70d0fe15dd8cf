package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// TestClusterFailover kills the master of a pool's slot in a cluster of the
// test's own and measures how soon decisions on that pool succeed again
// after the cluster itself is ok: within 2 s. Meanwhile every decision costs
// at most its budget, and the outage is reported once.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := testenv.StartCluster(t)
	client := c.Client(nil)
	store, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	rec := &keycaptest.Recorder{}
	l, err := keycap.NewLimiter(store, keycap.WithObserver(rec), keycap.WithDecisionBudget(200*time.Millisecond),
		keycap.WithDefaultFailMode(keycap.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lim := keycap.Spec{Name: "failover", Max: 1000}.For("k")
	master, err := c.MasterOf(store.Key(lim.Pool()))
	if err != nil {
		t.Fatal(err)
	}
	// Pools on every master: the others keep answering while one fails.
	var others []keycap.Limit
	for i := range 30 {
		others = append(others, keycap.Spec{Name: "failover", Max: 1000}.For(fmt.Sprint("other", i)))
	}
	ctx := context.Background()
	one := func(lim keycap.Limit) (time.Duration, error) {
		start := time.Now()
		ls, err := l.Acquire(ctx, lim)
		if err == nil {
			ls.Release()
		}
		return time.Since(start), err
	}
	var worst atomic.Int64 // the slowest decision during the failover, in ns
	note := func(took time.Duration) {
		for w := worst.Load(); int64(took) > w && !worst.CompareAndSwap(w, int64(took)); w = worst.Load() {
		}
	}
	decideOthers := func() {
		for _, o := range others {
			took, _ := one(o)
			note(took)
		}
	}
	decide := func() (time.Duration, error) {
		took, err := one(lim)
		decideOthers()
		return took, err
	}
	// Warm up: the first calls on a fresh cluster discover its slots and
	// load the function library on every master, which on a busy machine
	// can take longer than the 200 ms budget. This test measures the
	// failover, not a cold start.
	for deadline := time.Now().Add(15 * time.Second); ; {
		_, err := decide()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("before the kill, decisions still fail after 15 s: %v", err)
		}
	}
	// A warm-up that failed is an outage of its own: let it end, so that
	// the kill's is reported apart.
	for deadline := time.Now().Add(10 * time.Second); rec.Count(keycap.StoreFailed, "") > rec.Count(keycap.StoreRecovered, ""); {
		if time.Now().After(deadline) {
			t.Fatal("the warm-up's outage never ended")
		}
		_, _ = decide()
		time.Sleep(20 * time.Millisecond)
	}
	rec.Reset()

	c.Kill(master)
	killed := time.Now()
	var clusterOK atomic.Int64 // when the cluster was ok again, in ns since killed
	go func() {
		// Ok again: a replica has taken the slot over, and every live node
		// says the cluster is ok.
		for time.Since(killed) < 30*time.Second {
			if m, err := c.MasterOf(store.Key(lim.Pool())); err == nil && m != master && c.WaitOK(0) == nil {
				clusterOK.Store(int64(time.Since(killed)))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// The other pools are decided beside the killed master's, not between
	// its decisions: a third of them wait out the budget while their master
	// is down, and would delay the next look at whether decisions resumed
	// by seconds.
	stopOthers, othersStopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(othersStopped)
		for {
			select {
			case <-stopOthers:
				return
			default:
				decideOthers()
			}
		}
	}()
	var resumed time.Duration
	for time.Since(killed) < 40*time.Second {
		took, err := one(lim)
		note(took)
		if err == nil && clusterOK.Load() > 0 {
			resumed = time.Since(killed)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stopOthers)
	<-othersStopped
	ok := time.Duration(clusterOK.Load())
	t.Logf("cluster ok %s after the kill; decisions resumed %s after it; slowest decision %s", ok, resumed, time.Duration(worst.Load()))
	switch {
	case ok == 0:
		t.Fatal("the cluster never recovered")
	case resumed == 0:
		t.Fatalf("decisions never resumed (cluster ok %s after the kill)", ok)
	case resumed-ok > 2*time.Second:
		t.Errorf("decisions resumed %s after the cluster was ok, want at most 2s", resumed-ok)
	}
	if w := time.Duration(worst.Load()); w > time.Second {
		t.Errorf("a decision took %s during the failover, with a budget of 200ms", w)
	}
	// The outage ends once the master's slots have answered for a second.
	deadline := time.Now().Add(10 * time.Second)
	for rec.Count(keycap.StoreRecovered, "") == 0 && time.Now().Before(deadline) {
		_, _ = decide()
		time.Sleep(20 * time.Millisecond)
	}
	for _, e := range rec.Events() {
		if e.Kind == keycap.StoreFailed || e.Kind == keycap.StoreRecovered {
			t.Logf("%s node %q: %v", e.Kind, e.Node, e.Err)
		}
	}
	if f, r := rec.Count(keycap.StoreFailed, ""), rec.Count(keycap.StoreRecovered, ""); f != 1 || r != 1 {
		t.Errorf("one master's failover reported %d StoreFailed and %d StoreRecovered, want 1 and 1", f, r)
	}
}

// TestReplicaAcks: with WithReplicaAcks a grant counts only once a replica
// has it. A Redis without replicas cannot acknowledge: the grant is undone
// and reported as a store failure; on the cluster, whose masters each have
// a replica, grants succeed.
func TestReplicaAcks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	single := testenv.Redis(t)
	s, err := redisstore.New(single, redisstore.WithPrefix(testenv.Prefix(t, single)), redisstore.WithReplicaAcks(1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	pool, owner := store.PoolOf(0, "acks", "k"), store.NewOwner()
	if g, err := s.Acquire(ctx, pool, owner, store.Demand{Max: 1, TTL: time.Minute}); g.Granted || !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Acquire without replicas = %v, %v; want ErrNotReplicated", g.Granted, err)
	}
	if n := single.ZCard(ctx, s.Key(pool)).Val(); n != 0 {
		t.Fatalf("the unacknowledged grant was left in the pool (%d leases)", n)
	}
	// A waiter's grant (Queue) too.
	tk := store.Ticket{TTL: time.Minute, Claim: time.Minute}
	if g, err := s.Acquire(ctx, pool, owner, store.Demand{Max: 1, TTL: time.Minute, Line: tk}); g.Granted || !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Queue without replicas = %v, %v; want ErrNotReplicated", g.Granted, err)
	}
	if n := single.ZCard(ctx, s.Key(pool)).Val(); n != 0 {
		t.Fatalf("the unacknowledged queued grant was left in the pool (%d leases)", n)
	}

	cluster := testenv.RedisCluster(t)
	cs, err := redisstore.New(cluster, redisstore.WithPrefix(testenv.Prefix(t, cluster)), redisstore.WithReplicaAcks(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		p := store.PoolOf(0, "acks", fmt.Sprint(i)) // on every master
		if g, err := cs.Acquire(ctx, p, owner, store.Demand{Max: 1, TTL: time.Minute}); !g.Granted || err != nil {
			t.Fatalf("Acquire on the cluster = %v, %v", g.Granted, err)
		}
		if g, _ := cs.Acquire(ctx, p, store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute}); g.Granted {
			t.Fatal("an acknowledged pool admitted one over its cap")
		}
		if g, err := cs.Acquire(ctx, p, owner, store.Demand{Max: 1, TTL: time.Minute, Line: tk}); !g.Granted || err != nil {
			t.Fatalf("Queue by the holder on the cluster = %v, %v", g.Granted, err)
		}
	}
}

// TestNewRequiresContextTimeouts: a client that ignores its context's
// deadline would let a hung Redis stall decisions past their budget.
func TestNewRequiresContextTimeouts(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	if _, err := redisstore.New(c); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Fatalf("New with ContextTimeoutEnabled false = %v, want an error naming it", err)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	if _, err := redisstore.New(cc); err == nil {
		t.Fatal("a cluster client without ContextTimeoutEnabled accepted")
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := redisstore.New(ring); err == nil {
		t.Fatal("a ring without ContextTimeoutEnabled accepted")
	}
}

// TestHungRedisCostsTheBudget: a Redis that accepts and never answers (here
// frozen with SIGSTOP) costs each decision its budget, then the fail mode
// applies — open: the caller runs; closed: it is refused — and the outage is
// reported once, however many decisions meet it. Without a budget (the
// client's own timeouts: a 3 s read timeout, retried) the same decision
// takes seconds.
func TestHungRedisCostsTheBudget(t *testing.T) {
	t.Parallel()
	rp := testenv.StartRedis(t)
	o := rp.Options()
	o.ReadTimeout, o.WriteTimeout, o.MaxRetries = 3*time.Second, 3*time.Second, 3 // go-redis's defaults
	c := redis.NewClient(o)
	defer c.Close()
	store, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	rec := &keycaptest.Recorder{}
	l, err := keycap.NewLimiter(store, keycap.WithObserver(rec)) // default budget
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	open := keycap.Spec{Name: "hung", Max: 10}.For("open")
	closed := keycap.Spec{Name: "hung", Max: 10, FailMode: keycap.FailClosed}.For("closed")
	if ls, err := l.Acquire(ctx, open); err != nil {
		t.Fatal(err)
	} else {
		ls.Release()
	}
	rp.Hang()
	var worst time.Duration
	for i := range 10 {
		lim := open
		if i%2 == 1 {
			lim = closed
		}
		start := time.Now()
		ls, err := l.Acquire(ctx, lim)
		took := time.Since(start)
		worst = max(worst, took)
		switch {
		case lim == open && (err != nil || ls.Guarded()):
			t.Fatalf("fail open: %v, guarded %v", err, err == nil && ls.Guarded())
		case lim == closed && !errors.Is(err, keycap.ErrStoreUnavailable):
			t.Fatalf("fail closed: %v", err)
		}
		if ls != nil {
			ls.Release() // within its own budget too
		}
	}
	t.Logf("the slowest of 10 decisions on a hung Redis took %s (budget %s)", worst, keycap.DefaultBudget)
	if worst > keycap.DefaultBudget+300*time.Millisecond {
		t.Errorf("a decision on a hung Redis took %s, past its budget of %s", worst, keycap.DefaultBudget)
	}
	if n := rec.Count(keycap.StoreFailed, ""); n != 1 {
		t.Errorf("StoreFailed reported %d times for one outage, want 1", n)
	}
}
