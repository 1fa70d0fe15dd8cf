package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/store"
)

// TestNotificationsSurviveAReconnect: on a cluster, the channels of pools
// in several hash slots of one master share a connection; when it breaks,
// the store subscribes again (channel by channel: one SSUBSCRIBE for all
// would be refused with CROSSSLOT), tells its watchers to look, and later
// handoffs are notified again.
func TestNotificationsSurviveAReconnect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.RedisCluster(t)
	s := newStore(t, c, testenv.Prefix(t, c))
	var pools []store.PoolID
	master := ""
	for i := 0; len(pools) < 2; i++ {
		p := store.PoolOf(0, "reconnect", fmt.Sprint(i))
		m, err := c.MasterForKey(ctx, s.Channel(p))
		if err != nil {
			t.Fatal(err)
		}
		if master == "" || m.Options().Addr == master {
			master = m.Options().Addr
			pools = append(pools, p)
		}
	}
	// The slot ranges are loaded in the background from New on; a listing
	// reads them at once when they are not known yet.
	if _, err := s.InspectPools(ctx, store.PageQuery{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	if s.Partition(pools[0]) == "" {
		t.Fatal("the store names no partition after listing its pools")
	}
	heard := make(chan []store.Owner, 64)
	for _, p := range pools {
		stop, err := s.Notify(ctx, p, func(o []store.Owner) { heard <- o })
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	m, _ := c.MasterForKey(ctx, s.Channel(pools[0]))
	if n, err := m.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n == 0 {
		t.Fatalf("CLIENT KILL TYPE pubsub: %d, %v", n, err)
	}
	// The store tells its watchers to look once it has subscribed again.
	select {
	case o := <-heard:
		if len(o) != 0 {
			t.Fatalf("after the kill, heard of %v, want a call to look", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watchers were never told to look after the reconnect")
	}
	tk := store.Ticket{TTL: time.Minute, Claim: 10 * time.Second}
	for attempt := 0; ; attempt++ {
		a, b := store.NewOwner(), store.NewOwner()
		if g, err := s.Acquire(ctx, pools[0], a, store.Demand{Max: 1, TTL: time.Minute}); !g.Granted || err != nil {
			t.Fatalf("acquire: %v %v", g.Granted, err)
		}
		if g, err := s.Acquire(ctx, pools[0], b, store.Demand{Max: 1, TTL: time.Minute, Line: tk}); g.Granted || err != nil {
			t.Fatalf("queue: %v %v", g.Granted, err)
		}
		if _, err := s.Release(ctx, pools[0], a, store.Demand{}, false); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(time.Second)
	wait:
		for {
			select {
			case o := <-heard: // calls to look may come first
				if len(o) == 1 && o[0] == b {
					_, _ = s.Release(ctx, pools[0], b, store.Demand{}, false)
					return
				}
			case <-timeout:
				break wait
			}
		}
		_, _ = s.Release(ctx, pools[0], b, store.Demand{}, false)
		if attempt == 4 {
			t.Fatal("handoffs after the reconnect are not notified")
		}
	}
}
