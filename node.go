package keycap

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"
)

// DefaultHeartbeat is how often a Limiter's heartbeat renews its node's
// members, unless WithHeartbeat says otherwise.
const DefaultHeartbeat = 30 * time.Second

// WithNode names this process (its node) among those sharing the store:
// member leases (AcquireAs) belong to it. Names must be unique among the
// nodes sharing a store. Default: the host name, the process ID and a random
// suffix, so that a restarted node never mistakes its predecessor's members
// for its own.
func WithNode(name string) Option { return Option{func(l *Limiter) { l.nodeName = name }} }

// WithHeartbeat sets how often the node's heartbeat renews its member leases
// and drops its ghosts (default DefaultHeartbeat). A member limit's TTL must
// exceed it.
func WithHeartbeat(d time.Duration) Option { return Option{func(l *Limiter) { l.nodes.interval = d }} }

// AcquireAs is Acquire for a lease that belongs to this node as its member
// named member — a WebSocket connection, say, that lives as long as the
// node serves it. Such leases are kept alive not one by one but by the
// node's heartbeat (WithHeartbeat): one Syncer.Sync batch — one round trip
// per store node — makes the node's part of every pool it touches exactly
// its live members: renewed, put back if the store lost them (even beyond
// max: the node holds them), and the node's ghosts, members whose release
// never reached the store, dropped. So a lost release costs a slot for at
// most one heartbeat, and a node that dies frees its members within their
// TTL with nobody's help. A member lease is never lost.
//
// The lease's owner token is NodeOwner(node, member): acquiring a member
// again, while its lease is held, extends the same slot. Keep one lease per
// member. The store must implement Syncer. A member lease's TTL is the
// limit's WithTTL, which must exceed the heartbeat, or, for a limit built
// without one, three heartbeats (MemberTTLBeats): a node whose heartbeat
// runs less than two beats late keeps its members. A limit failing open admits the member
// uncounted; the first heartbeat after the store recovers counts it.
func (l *Limiter) AcquireAs(ctx context.Context, member string, limits ...Limit) (*Lease, error) {
	copied := false
	for i, lim := range limits {
		if !lim.ttlSet {
			if !copied {
				limits, copied = append([]Limit(nil), limits...), true // the caller's slice is theirs
			}
			limits[i].ttl = MemberTTLBeats * l.nodes.interval
		}
	}
	return l.acquire(ctx, &member, nil, limits, false)
}

// MemberTTLBeats is the TTL of a member lease whose limit has no WithTTL, in
// heartbeats.
const MemberTTLBeats = 3

// Heartbeat renews the node's member leases and drops its ghosts now, as the
// heartbeat loop does every interval. Tests and shutdown code may call it.
func (l *Limiter) Heartbeat(ctx context.Context) error { return l.nodes.sync(ctx, false) }

// Withdraw removes every member lease of this node from the store, in one
// Syncer.Sync batch, so that their slots are free at once: call it when the
// node stops serving its members (conncap.Cap.Close does). Releasing a
// withdrawn lease afterwards does nothing more.
func (l *Limiter) Withdraw(ctx context.Context) error { return l.nodes.sync(ctx, true) }

// Node returns this node's name.
func (l *Limiter) Node() string { return l.nodeName }

// nodes is a Limiter's registry of member leases, by pool, and its
// heartbeat.
type nodes struct {
	l        *Limiter
	syncer   Syncer // nil when the store cannot sync
	interval time.Duration

	mu      sync.Mutex
	pools   map[PoolID]*memberPool
	running bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}
}

// memberPool is this node's part of one pool.
type memberPool struct {
	limit   Limit
	members map[Owner]struct{}
}

func (n *nodes) init(l *Limiter) error {
	n.l = l
	n.syncer, _ = l.store.(Syncer)
	n.pools = map[PoolID]*memberPool{}
	n.stop, n.done = make(chan struct{}), make(chan struct{})
	if n.interval == 0 {
		n.interval = DefaultHeartbeat
	}
	if n.interval <= 0 {
		return &InvalidLimitError{Field: "heartbeat", Value: n.interval.String(), Reason: "must be positive"}
	}
	if l.nodeName == "" {
		host, _ := os.Hostname()
		l.nodeName = fmt.Sprintf("%s-%d-%08x", host, os.Getpid(), rand.Uint32())
	}
	l.node = NewNodeID(l.nodeName)
	return nil
}

// check validates limits for a member lease.
func (n *nodes) check(limits []Limit) error {
	if n.syncer == nil {
		return fmt.Errorf("%w: member leases need a store that syncs a node's members (keycap.Syncer); %T does not", ErrInvalidLimit, n.l.store)
	}
	for _, lim := range limits {
		if lim.ttl <= n.interval {
			return &InvalidLimitError{Field: "ttl", Value: lim.ttl.String(), Reason: "must exceed the heartbeat of " + n.interval.String() + " for a member lease"}
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
			mp = &memberPool{limit: s.limit, members: map[Owner]struct{}{}}
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
	if n.syncer == nil {
		return nil
	}
	n.mu.Lock()
	batch := make([]SyncPool, 0, len(n.pools))
	limits := make([]Limit, 0, len(n.pools))
	var ttl time.Duration // the longest: Sync renews a batch to one TTL
	for id, mp := range n.pools {
		ttl = max(ttl, mp.limit.ttl)
		sp := SyncPool{Pool: id}
		if !none {
			sp.Members = make([]Owner, 0, len(mp.members))
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
	bctx, cancel := l.bound(ctx, max(l.budget, n.interval))
	err := n.syncer.Sync(bctx, l.node, ttl, batch)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			l.storeFailed(limits[0], err)
		}
		return err
	}
	var failure error
	var ghosts []Event
	answered := []PoolID(nil)
	n.mu.Lock()
	for i, sp := range batch {
		if sp.Err != nil {
			failure = sp.Err
			continue
		}
		answered = append(answered, sp.Pool)
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
		if sp.Err != nil {
			l.storeFailed(limits[i], sp.Err)
		}
	}
	for _, p := range answered {
		l.storeAnswered(p)
	}
	for _, e := range ghosts {
		l.emit(e)
	}
	return failure
}

// HeartbeatInterval returns how often the node's heartbeat runs.
func (l *Limiter) HeartbeatInterval() time.Duration { return l.nodes.interval }
