package keycap

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/keycap/keycap/store"
)

// DefaultHeartbeat is how often a Limiter's heartbeat renews its node's
// members, unless WithHeartbeat says otherwise.
const DefaultHeartbeat = 30 * time.Second

// WithNode names this process (its node) among those sharing the store:
// member leases (frontdoor.AcquireMember) belong to it. Names must be unique among the
// nodes sharing a store. Default: the host name, the process ID and a random
// suffix, so that a restarted node never mistakes its predecessor's members
// for its own.
func WithNode(name string) Option { return Option{func(l *Limiter) { l.nodes.name = name }} }

// WithHeartbeat sets how often the node's heartbeat renews its member leases
// and drops its ghosts (default DefaultHeartbeat). A member limit's TTL must
// exceed it.
func WithHeartbeat(d time.Duration) Option { return Option{func(l *Limiter) { l.nodes.interval = d }} }

// acquireAs takes a member lease of this node named member (see
// frontdoor.AcquireMember). A limit whose spec sets no TTL gets
// three heartbeats (memberTTLBeats).
func (l *Limiter) acquireAs(ctx context.Context, member string, limits []Limit) (*Lease, error) {
	copied := false
	for i := range limits {
		if !limits[i].ttlSet {
			if !copied {
				limits, copied = append([]Limit(nil), limits...), true // the caller's slice is theirs
			}
			limits[i].spec.TTL = memberTTLBeats * l.nodes.interval
		}
	}
	return l.acquire(ctx, request{limits: limits, member: &member})
}

// memberTTLBeats is the TTL of a member lease whose spec sets none, in
// heartbeats.
const memberTTLBeats = 3

// nodes is a Limiter's registry of member leases, by pool, and its
// heartbeat.
type nodes struct {
	l        *Limiter
	name     string       // the node's (WithNode)
	id       store.NodeID // from its name
	interval time.Duration

	mu      sync.Mutex
	pools   map[store.PoolID]*memberPool
	running bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}
}

// memberPool is this node's part of one pool.
type memberPool struct {
	limit   Limit
	members map[store.Owner]struct{}
}

func (n *nodes) init(l *Limiter) error {
	n.l = l
	n.pools = map[store.PoolID]*memberPool{}
	n.stop, n.done = make(chan struct{}), make(chan struct{})
	if n.interval == 0 {
		n.interval = DefaultHeartbeat
	}
	if n.interval <= 0 {
		return &InvalidLimitError{Field: "heartbeat", Value: n.interval.String(), Reason: "must be positive"}
	}
	if n.name == "" {
		host, _ := os.Hostname()
		n.name = fmt.Sprintf("%s-%d-%08x", host, os.Getpid(), rand.Uint32())
	}
	n.id = store.NodeOf(n.name)
	return nil
}

// check validates limits for a member lease.
func (n *nodes) check(limits []Limit) error {
	if !n.l.has(store.Members) {
		return fmt.Errorf("member leases: %w", n.l.need(store.Members))
	}
	for _, lim := range limits {
		if lim.spec.TTL <= n.interval {
			return &InvalidLimitError{Field: "TTL", Value: lim.spec.TTL.String(), Reason: "must exceed the heartbeat of " + n.interval.String() + " for a member lease"}
		}
	}
	return nil
}

// add registers a member lease's slots (held, or skipped by a store failing
// open: the next heartbeat counts those) before it is handed out.
func (n *nodes) add(ls *Lease) {
	n.mu.Lock()
	for i := range ls.slots {
		s := &ls.slots[i]
		mp := n.pools[s.limit.pool]
		if mp == nil {
			mp = &memberPool{limit: s.limit, members: map[store.Owner]struct{}{}}
			n.pools[s.limit.pool] = mp
		}
		mp.members[ls.owner] = struct{}{}
	}
	start := !n.running && !n.stopped
	n.running = n.running || start
	n.mu.Unlock()
	if start {
		go n.loop()
	}
}

// remove unregisters a member lease; its pools stay known until a heartbeat
// has made the store agree.
func (n *nodes) remove(ls *Lease) {
	n.mu.Lock()
	for i := range ls.slots {
		if mp := n.pools[ls.slots[i].limit.pool]; mp != nil {
			delete(mp.members, ls.owner)
		}
	}
	n.mu.Unlock()
}

func (n *nodes) loop() {
	defer close(n.done)
	t := time.NewTicker(n.interval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			_ = n.sync(context.Background(), false)
		}
	}
}

func (n *nodes) close() {
	n.mu.Lock()
	n.stopped = true
	running := n.running
	n.mu.Unlock()
	if running {
		close(n.stop)
		<-n.done
	}
}

// sync makes the store hold exactly this node's members; with none, it
// withdraws every one of them.
func (n *nodes) sync(ctx context.Context, none bool) error {
	if !n.l.has(store.Members) {
		return nil
	}
	n.mu.Lock()
	batch := make([]store.SyncPool, 0, len(n.pools))
	limits := make([]Limit, 0, len(n.pools))
	var ttl time.Duration // the longest: Sync renews a batch to one TTL
	for id, mp := range n.pools {
		ttl = max(ttl, mp.limit.spec.TTL)
		sp := store.SyncPool{Pool: id}
		if !none {
			sp.Members = make([]store.Owner, 0, len(mp.members))
			for m := range mp.members {
				sp.Members = append(sp.Members, m)
			}
		}
		batch = append(batch, sp)
		limits = append(limits, mp.limit)
	}
	if none {
		clear(n.pools)
	}
	n.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	l := n.l
	err := l.run(ctx, max(l.budget, n.interval), func(ctx context.Context) error {
		return l.store.Sync(ctx, n.id, ttl, batch)
	})
	if err != nil {
		return l.account(ctx, &limits[0], err)
	}
	var failure error
	var ghosts []Event
	n.mu.Lock()
	for i, sp := range batch {
		if sp.Err != nil {
			failure = sp.Err
			continue
		}
		if sp.Removed > 0 {
			ghosts = append(ghosts, Event{Kind: GhostsDropped, Limit: limits[i], Count: sp.Removed})
		}
		// A pool with no live member, now empty in the store too, is
		// forgotten: it costs nothing in later heartbeats.
		if mp := n.pools[sp.Pool]; mp != nil && len(mp.members) == 0 && len(sp.Members) == 0 {
			delete(n.pools, sp.Pool)
		}
	}
	n.mu.Unlock()
	for i, sp := range batch {
		l.account(ctx, &limits[i], sp.Err)
	}
	for _, e := range ghosts {
		l.emit(e)
	}
	return failure
}
