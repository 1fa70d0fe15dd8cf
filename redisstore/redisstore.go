// Package redisstore keeps keycap's leases in Redis, so that caps hold across
// every process that shares it. It works unchanged on a single Redis, Redis
// Sentinel (a failover client) and Redis Cluster, through go-redis's
// UniversalClient, on Redis 6.2 or later and on Valkey.
//
// Each pool is one key, a sorted set of owner token → expiry, and each
// operation is one script (or command) on that one key: acquiring, refusing,
// renewing and releasing cost one round trip each, whatever the limit's max.
// Renewals of many leases are pipelined: one round trip per Redis node. The
// scripts read Redis's TIME, so leases expire by the server's clock, never by
// a client's. A key expires with its last lease: idle pools leave nothing
// behind.
//
// Keys look like
//
//	<prefix>keycap:slots:{<32 hex digits>}
//
// where the digits are the pool's hash (store.PoolID) and the braces make
// them a Redis Cluster hash tag, so any key added later for the same pool
// lands in the same slot. While callers wait, a pool also has a wait line
// (store.Lines): keycap:line:{…} and keycap:lmeta:{…}, updated by the same
// scripts in the same round trip, and its handoffs are published on the
// sharded channel keycap:wake:{…} (store.Notifications; Redis 7 or later, else
// waiters poll).
//
// A pool's digits start with the 8 of its limit name's tag (store.Tag),
// so the keys of a name's pools share a prefix, keycap:slots:{<tag>…, and
// inspection (store.Inspection) finds them with SCAN and its MATCH (which
// takes in their lines and the parents' keys), on every master of a
// cluster in turn, never with KEYS: a page costs at most 256 SCANs of at
// most 250 keys, whatever the size of the keyspace, and the scripts that
// read what they found touch one pool's slot each. Overrides
// (store.Overrides) are one hash, keycap:overrides:{o}, of pool →
// override, and their version, keycap:overrides:{o}:v, on one slot
// (overrideNames).
//
// Every call is bounded by its context's deadline — the Limiter's decision
// budget, when it is one — so the client must have ContextTimeoutEnabled: New
// refuses a *redis.Client, *redis.ClusterClient or *redis.Ring without it, since go-redis
// would otherwise wait its own read timeout, and retry it, past any budget.
// A pipelined call (an acquire, a release) whose deadline passes unanswered
// says how long Redis had it (store.UnansweredError): the Limiter does not
// count against Redis the time the call waited in the process to be sent.
//
// On Redis Cluster the store helps the client follow a failover: when a
// node does not answer, it asks go-redis to reload the cluster's slots at
// once (go-redis alone reloads them on MOVED replies, which a dead master
// never sends, or after ClusterStateReloadInterval), so decisions resume as
// soon as a replica has taken over. The store also reports which slot range
// holds a pool (store.Partitions), so that the Limiter counts an outage of
// one master as one outage.
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/store"
)

var (
	//go:embed line.lua
	lineLua string

	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(lineLua + linePrologue + acquireLua)

	//go:embed queue.lua
	queueLua    string
	queueScript = redis.NewScript(lineLua + linePrologue + queueLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(lineLua + linePrologue + releaseLua)

	//go:embed renew.lua
	renewLua    string
	renewScript = redis.NewScript(renewLua)

	//go:embed mark.lua
	markLua    string
	markScript = redis.NewScript(markLua)

	//go:embed pause.lua
	pauseLua    string
	pauseScript = redis.NewScript(pauseLua)

	//go:embed sync.lua
	syncLua    string
	syncScript = redis.NewScript(syncLua)

	//go:embed share.lua
	shareLua    string
	shareScript = redis.NewScript(shareSource)
)

// Store is a keycap store on Redis.
type Store struct {
	store.Unsupported // pinned slots: not here

	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless client is one
	prefix  string
	rates   *redis_rate.Limiter
	slots   slotRanges
	acks    int           // WithReplicaAcks: replicas that must acknowledge a grant
	ackWait time.Duration // ...within this
	hub     hub           // Notify's subscriptions
	queues  queues        // the pipelines of each node's decisions (batch.go)

	functions functions // whether the line's scripts run as functions (functions.go)
}

var _ store.Store = (*Store)(nil)

// Features implements store.Store: everything but pinned slots, and
// partitions (a cluster's slot ranges) on a cluster only.
func (s *Store) Features() store.Features {
	f := store.Lines | store.Notifications | store.Shares | store.AsyncRelease | store.Members |
		store.Marks | store.Pauses | store.Paces | store.Inspection | store.Overrides | store.Fences | store.Totals
	if s.cluster != nil {
		f |= store.Partitions
	}
	return f
}

// An Option configures a Store; the With functions make them, and New
// checks them.
type Option struct{ apply func(*config) }

type config struct {
	prefix  string
	acks    int
	ackWait time.Duration
	acksSet bool
}

// WithPrefix puts prefix before every key the store writes, to keep several
// applications apart on one Redis. It must not contain '{' or '}', which would
// break the keys' cluster hash tags.
func WithPrefix(prefix string) Option { return Option{func(c *config) { c.prefix = prefix }} }

// WithReplicaAcks makes every granted slot wait, in the same round trip, for
// n replicas to acknowledge it (Redis's WAIT n, for at most timeout) before
// the grant counts. Redis replicates asynchronously: a master that dies
// right after a grant can lose it, and the replica that takes over may then
// admit one more holder than the cap until the lost lease's holder renews
// (docs/operations.md). With acknowledgements, a grant that fewer than n
// replicas confirmed in time is undone and reported as a store failure, so
// the limit's fail mode applies. Grants to waiters (an Acquire with a ticket) are acknowledged
// the same way. It costs the replication latency on every grant
// (BENCHMARKS.md has the figure), and a release is waited for
// (ReleaseAsync). n at least 1; timeout positive.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return Option{func(c *config) { c.acks, c.ackWait, c.acksSet = n, timeout, true }}
}

// New returns a store that uses client, which may be a *redis.Client, a
// failover client, a *redis.ClusterClient or a *redis.Ring, with
// ContextTimeoutEnabled (New refuses those without it; a client of another
// type, a wrapper of your own, must have it too, unchecked). It
// makes no call to Redis but, on a cluster, one CLUSTER SLOTS in the
// background: a Redis that is down at start-up is a store failure on first
// use, handled by each limit's fail mode.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: client is nil")
	}
	switch c := client.(type) {
	case *redis.Client:
		if !c.Options().ContextTimeoutEnabled {
			return nil, errContextTimeouts
		}
	case *redis.ClusterClient:
		if !c.Options().ContextTimeoutEnabled {
			return nil, errContextTimeouts
		}
	case *redis.Ring:
		if !c.Options().ContextTimeoutEnabled {
			return nil, errContextTimeouts
		}
	}
	var c config
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	switch {
	case strings.ContainsAny(c.prefix, "{}"):
		return nil, fmt.Errorf("redisstore: invalid prefix %q: must not contain '{' or '}'", c.prefix)
	case c.acksSet && (c.acks < 1 || c.ackWait <= 0):
		return nil, fmt.Errorf("redisstore: invalid replica acks %d within %s: want at least 1 within a positive timeout", c.acks, c.ackWait)
	}
	s := &Store{client: client, rates: redis_rate.NewLimiter(client), prefix: c.prefix, acks: c.acks, ackWait: c.ackWait}
	s.cluster, _ = client.(*redis.ClusterClient)
	s.hub.init(s)
	s.queues.init(s)
	if s.cluster != nil {
		go s.slots.refresh(s.cluster)
	}
	return s, nil
}

var errContextTimeouts = errors.New("redisstore: the client's ContextTimeoutEnabled is false: set it, or a hung Redis makes every decision wait go-redis's read timeout, and its retries, past the Limiter's decision budget")

// failed is called with every error of a call. On a cluster, an error that
// is not Redis's own reply (a node that does not answer) makes go-redis
// reload the slots at once, to find the master that replaced a dead one;
// a call that never left the process says nothing of the nodes.
func (s *Store) failed(err error) {
	if s.cluster == nil || err == nil || errors.Is(err, context.Canceled) {
		return
	}
	if u := (*store.UnansweredError)(nil); errors.As(err, &u) && u.Outstanding == 0 {
		return // it never left the process: nothing to say of a node
	}
	var re redis.Error
	if errors.As(err, &re) && !redis.HasErrorPrefix(err, "CLUSTERDOWN") && !redis.HasErrorPrefix(err, "TRYAGAIN") {
		return // Redis answered
	}
	s.cluster.ReloadState(context.Background()) // lazy: at most one reload at a time
	go s.slots.refresh(s.cluster)
}

// Client returns the client the store uses.
func (s *Store) Client() redis.UniversalClient { return s.client }

// key returns the Redis key of pool.
func (s *Store) key(pool store.PoolID) string {
	return s.prefix + "keycap:slots:{" + pool.String() + "}"
}

// channel returns the pub/sub channel on which pool's handoffs are
// published (SPUBLISH: sharded on Redis Cluster), each message the owner
// tokens served, 16 bytes each.
func (s *Store) channel(pool store.PoolID) string {
	_, channel := s.names(pool)
	return channel
}

// names returns the keys of pool's scripts (its slots, as key, and its
// line's two keys) and its channel, built as the hot calls build them
// (poolNames, calls.go).
func (s *Store) names(pool store.PoolID) (keys []string, channel string) {
	n := new(poolNames)
	n.fill(s.prefix, pool, store.Owner{})
	return n.keys[:], n.channel
}

// ms converts a TTL to whole milliseconds, rounding up so that a lease never
// lives shorter than asked.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Acquire implements store.Store: one EVALSHA (and, with WithReplicaAcks,
// a WAIT in the same round trip). A plain slot's, with or without a
// ticket, is pipelined with the node's other decisions of the moment
// (batch.go); a demand with a weight or a parent runs share.lua or the
// plain scripts with its weight (share.go).
func (s *Store) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	switch {
	case d.Pinned:
		return store.Grant{}, store.Need(s, store.Pinned)
	case !d.Plain() || d.Fence:
		return s.acquireShared(ctx, demand{d, pool, owner})
	case d.Line.TTL > 0:
		return s.queue(ctx, pool, owner, d.Max, d.TTL, d.Line)
	}
	ok, err := s.acquire(ctx, pool, owner, d.Max, d.TTL)
	return store.Grant{Granted: ok}, err
}

// acquire takes owner's plain slot of pool.
func (s *Store) acquire(ctx context.Context, pool store.PoolID, owner store.Owner, max int, ttl time.Duration) (bool, error) {
	if s.acks > 0 {
		return s.acquireAcked(ctx, pool, owner, max, ttl)
	}
	c := s.newAcquire(pool, owner, max, ttl)
	err := s.run(ctx, pool, &c.op)
	if err == nil {
		err = c.cmd.Err()
	}
	if err != nil {
		s.failed(err)
		return false, fmt.Errorf("redisstore: acquire: %w", err)
	}
	n, err := c.cmd.Int()
	if err != nil {
		return false, fmt.Errorf("redisstore: acquire: %w", err)
	}
	return n == 1, nil
}

// ErrNotReplicated is the error of a grant that fewer replicas acknowledged
// than WithReplicaAcks asks: the grant was undone.
var ErrNotReplicated = errors.New("redisstore: grant not acknowledged by enough replicas in time")

// acquireAcked runs the acquire script and WAIT in one pipeline on the
// master of the pool's key, so that the answer arrives once the grant is
// on acks replicas.
func (s *Store) acquireAcked(ctx context.Context, pool store.PoolID, owner store.Owner, max int, ttl time.Duration) (bool, error) {
	keys, channel := s.names(pool)
	run, acked, err := s.acked(ctx, acquireScript, keys, owner[:], max, ms(ttl), channel)
	if err != nil {
		return false, fmt.Errorf("redisstore: acquire: %w", err)
	}
	n, _ := run.Int()
	if n != 1 {
		return false, nil
	}
	if err := s.checkAcked(ctx, pool, owner, acked, false); err != nil {
		return false, fmt.Errorf("redisstore: acquire: %w", err)
	}
	return true, nil
}

// acked runs script and WAIT in one pipeline on the master of keys[0],
// loading the script once if Redis lost it. It returns the script's reply
// and WAIT's.
func (s *Store) acked(ctx context.Context, script *redis.Script, keys []string, args ...any) (*redis.Cmd, *redis.Cmd, error) {
	var node redis.Cmdable = s.client
	if s.cluster != nil {
		m, err := s.cluster.MasterForKey(ctx, keys[0])
		if err != nil {
			s.failed(err)
			return nil, nil, err
		}
		node = m
	}
	for attempt := 0; ; attempt++ {
		var run, wait *redis.Cmd
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			run = script.EvalSha(ctx, p, keys, args...)
			wait = p.Do(ctx, "WAIT", s.acks, ms(s.ackWait))
			return nil
		})
		err := run.Err()
		if redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
			if err := script.Load(ctx, node).Err(); err != nil {
				s.failed(err)
				return nil, nil, fmt.Errorf("loading script: %w", err)
			}
			continue
		}
		if err != nil {
			s.failed(err)
			return nil, nil, err
		}
		return run, wait, nil
	}
}

// checkAcked undoes a grant that fewer replicas than WithReplicaAcks
// acknowledged in time (a queued grant leaves the line too).
func (s *Store) checkAcked(ctx context.Context, pool store.PoolID, owner store.Owner, wait *redis.Cmd, queued bool) error {
	got, err := wait.Int64()
	if err == nil && got >= int64(s.acks) {
		return nil
	}
	undo := s.release
	if queued {
		undo = s.dequeue
	}
	_ = undo(context.WithoutCancel(ctx), pool, owner)
	if err != nil {
		return fmt.Errorf("WAIT: %w", err)
	}
	return fmt.Errorf("%w: %d of %d replicas within %s", ErrNotReplicated, got, s.acks, s.ackWait)
}

// Release implements store.Store. A plain slot's is a ZREM and an EXISTS
// of the pool's line in one round trip, and, only when someone waits, a
// second one: the script that hands the slot to the line (release.lua). Run
// in order on one connection, the EXISTS sees every ticket taken before the
// ZREM freed the slot; a caller that queues after it finds the slot free.
// Leaving the line is one EVALSHA of release.lua; a demand with a weight
// or a parent is released by share.go.
func (s *Store) Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	switch {
	case !d.Plain():
		return s.releaseShared(ctx, demand{d, pool, owner}, leave)
	case leave:
		return false, s.dequeue(ctx, pool, owner)
	}
	return false, s.release(ctx, pool, owner)
}

// demand is a Demand with the pool and the owner it is made for.
type demand struct {
	store.Demand
	Pool  store.PoolID
	Owner store.Owner
}

// release frees owner's plain slot of pool.
func (s *Store) release(ctx context.Context, pool store.PoolID, owner store.Owner) error {
	c := s.newRelease(pool, owner)
	err := s.run(ctx, pool, &c.op)
	if err == nil {
		err = c.op.err()
	}
	if err == nil && c.waiting.Val() == 1 {
		hand := c.handOn(s)
		if err = s.do(ctx, pool, true, hand); err == nil {
			err = hand.Err()
		}
	}
	if err != nil {
		s.failed(err)
		return fmt.Errorf("redisstore: release: %w", err)
	}
	return nil
}

// ReleaseAsync implements store.Store: a plain slot's release joins the
// node's next pipeline, and done is called with the outcome once it has
// their replies (on the node's sender: done must not block). An acquire,
// release, queue or dequeue of the pool that the store receives after
// ReleaseAsync returns reaches Redis after the release (it takes the same
// lane); InspectPools, which reads on a pipeline of its own, may see the
// slot held until done is called. Not sent once budget has passed (0: no
// bound but the client's timeouts); done then has a deadline error.
//
// With WithReplicaAcks, grants go on a connection of their own (the acquire
// and its WAIT), which no lane's order covers: ReleaseAsync then waits for
// the release, within budget, and calls done before it returns.
//
// A demand with a weight or a parent, which no lane carries, is released
// the same way: waited for.
func (s *Store) ReleaseAsync(pool store.PoolID, owner store.Owner, d store.Demand, budget time.Duration, done func(error)) {
	if s.acks > 0 || !d.Plain() {
		ctx, cancel := context.Background(), noCancel
		if budget > 0 {
			ctx, cancel = context.WithTimeout(ctx, budget)
		}
		_, err := s.Release(ctx, pool, owner, d, false)
		cancel()
		done(err)
		return
	}
	c := s.newRelease(pool, owner)
	o := &c.op
	if budget > 0 {
		o.deadline = time.Now().Add(budget)
	}
	var q *queue // the queue o is on, to hand the slot on in
	finish := func(err error) {
		if err != nil {
			s.failed(err)
			err = fmt.Errorf("redisstore: release: %w", err)
		}
		done(err)
	}
	o.then = func(o *op) {
		if err := o.err(); err != nil || c.waiting.Val() != 1 {
			var u *store.UnansweredError
			if err != nil && budget > 0 && clock() >= instantOf(o.deadline) && !errors.As(err, &u) {
				err = o.unanswered(err, instantOf(o.deadline), q) // its pipeline outlived its deadline; o was sent
			}
			finish(err)
			return
		}
		// Someone waits: hand the slot on in the next pipeline.
		hand := &op{cmds: []redis.Cmder{c.handOn(s)}, script: true, deadline: o.deadline}
		hand.then = func(h *op) { finish(h.err()) }
		q.submit(hand)
	}
	q = s.queues.of(s, pool)
	q.enqueue(o)
}

// errOf returns the first error of cmds.
func errOf(cmds ...redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

// queue is acquire for a caller that waits: one EVALSHA, which grants, or
// refuses and queues.
func (s *Store) queue(ctx context.Context, pool store.PoolID, owner store.Owner, max int, ttl time.Duration, t store.Ticket) (store.Grant, error) {
	keys, channel := s.names(pool)
	args := []any{owner[:], max, ms(ttl), ms(t.TTL), ms(t.Claim), channel}
	var res []int64
	var wait *redis.Cmd
	var err error
	if s.acks > 0 {
		var run *redis.Cmd
		if run, wait, err = s.acked(ctx, queueScript, keys, args...); err == nil {
			res, err = run.Int64Slice()
		}
	} else {
		cmd := s.script(queueScript, keys, args...)
		if err = s.do(ctx, pool, true, cmd); err == nil {
			res, err = cmd.Int64Slice()
		}
		if err != nil {
			s.failed(err)
		}
	}
	if err != nil {
		return store.Grant{}, fmt.Errorf("redisstore: queue: %w", err)
	}
	if len(res) != 2 {
		return store.Grant{}, fmt.Errorf("redisstore: queue: unexpected reply %v", res)
	}
	if res[0] == 1 && wait != nil {
		if err := s.checkAcked(ctx, pool, owner, wait, true); err != nil {
			return store.Grant{}, fmt.Errorf("redisstore: queue: %w", err)
		}
	}
	return store.Grant{Granted: res[0] == 1, Ahead: int(res[1])}, nil
}

// dequeue takes owner out of pool's line: one EVALSHA.
func (s *Store) dequeue(ctx context.Context, pool store.PoolID, owner store.Owner) error {
	keys, channel := s.names(pool)
	cmd := s.script(releaseScript, keys, owner[:], 1, channel)
	err := s.do(ctx, pool, true, cmd)
	if err == nil {
		err = cmd.Err()
	}
	if err != nil {
		s.failed(err)
		return fmt.Errorf("redisstore: dequeue: %w", err)
	}
	return nil
}

// Partition implements store.Store: on a cluster, the slot range
// that holds pool ("slots 0-5460"), which stays the same when its master
// fails over; "" for a single Redis, or while the ranges are not known yet.
func (s *Store) Partition(pool store.PoolID) string {
	if s.cluster == nil {
		return ""
	}
	return s.slots.of(slotOf(pool))
}

// Renew implements store.Store: one pipeline of EVALSHA, which go-redis
// sends as one round trip per node.
func (s *Store) Renew(ctx context.Context, batch []store.Renewal) error {
	return s.pipelined(ctx, len(batch),
		func(i int) (*redis.Script, []string, []any) {
			r := &batch[i]
			switch {
			case r.Parent != (store.PoolID{}):
				keys, lines, channel := s.shareNames(r.Parent)
				return shareScript, keys, []any{"renew", lines, channel, r.Pool.String(), r.Owner[:], max(r.Weight, 1), ms(r.TTL)}
			case r.Weight > 1:
				return renewScript, []string{s.key(r.Pool)}, []any{r.Owner[:], ms(r.TTL), r.Weight}
			}
			return renewScript, []string{s.key(r.Pool)}, []any{r.Owner[:], ms(r.TTL)}
		},
		func(i int, n int64, err error) {
			batch[i].Lost, batch[i].Err = err == nil && n != 1, err
			if err != nil {
				s.failed(err)
				batch[i].Err = fmt.Errorf("redisstore: renew: %w", err)
			}
		})
}

// Sync implements store.Store: one pipeline, one round trip per node, of
// sync.lua calls: one per pool on a cluster or a Ring (a script's keys share
// a slot), one per syncChunk pools on one Redis.
func (s *Store) Sync(ctx context.Context, node store.NodeID, ttl time.Duration, batch []store.SyncPool) error {
	chunk := 1
	if _, single := s.client.(*redis.Client); single {
		chunk = syncChunk
	}
	part := func(c int) []store.SyncPool { return batch[c*chunk : min((c+1)*chunk, len(batch))] }
	return s.pipelinedCmds(ctx, (len(batch)+chunk-1)/chunk,
		func(c int) (*redis.Script, []string, []any) {
			pools := part(c)
			keys := make([]string, len(pools))
			args := []any{node[:], ms(ttl)}
			for i := range pools {
				keys[i] = s.key(pools[i].Pool)
				args = append(args, len(pools[i].Members))
				for _, m := range pools[i].Members {
					args = append(args, m[:])
				}
			}
			return syncScript, keys, args
		},
		func(c int, cmd *redis.Cmd, err error) {
			pools := part(c)
			var removed []int64
			if err == nil {
				if removed, err = cmd.Int64Slice(); err == nil && len(removed) != len(pools) {
					err = fmt.Errorf("unexpected reply of %d counts for %d pools", len(removed), len(pools))
				}
			}
			if err != nil {
				s.failed(err)
				err = fmt.Errorf("redisstore: sync: %w", err)
			}
			for i := range pools {
				pools[i].Err = err
				if err == nil {
					pools[i].Removed = int(removed[i])
				}
			}
		})
}

// syncChunk is how many pools one sync.lua call syncs on one Redis: enough
// to spread a script call's cost, few enough that one call holds Redis for
// about a millisecond.
const syncChunk = 64

// pipelined runs one script per item (whose script, keys and arguments item
// gives) in one pipeline, and hands each result to done. If Redis lost its script
// cache (a restart, SCRIPT FLUSH), the scripts are loaded and the affected
// items tried once more. It returns an error only when ctx ended, so that no
// item's outcome is known.
func (s *Store) pipelined(ctx context.Context, n int, item func(i int) (*redis.Script, []string, []any), done func(i int, result int64, err error)) error {
	return s.pipelinedCmds(ctx, n, item, func(i int, cmd *redis.Cmd, err error) {
		var res int64
		if err == nil {
			res, err = cmd.Int64()
		}
		done(i, res, err)
	})
}

// pipelinedCmds is pipelined, handing each item's command to done (err is
// the command's error, or the error of loading the scripts).
func (s *Store) pipelinedCmds(ctx context.Context, n int, item func(i int) (*redis.Script, []string, []any), done func(i int, cmd *redis.Cmd, err error)) error {
	todo := make([]int, n)
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; len(todo) > 0; attempt++ {
		cmds := make([]*redis.Cmd, len(todo))
		_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, i := range todo {
				script, keys, args := item(i)
				cmds[j] = script.EvalSha(ctx, p, keys, args...)
			}
			return nil
		})
		var again []int
		for j, i := range todo {
			err := cmds[j].Err()
			if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
				again = append(again, i)
				continue
			}
			done(i, cmds[j], err)
		}
		if len(again) > 0 {
			if err := s.loadScripts(ctx); err != nil {
				for _, i := range again {
					done(i, nil, fmt.Errorf("loading script: %w", err))
				}
				break
			}
		}
		todo = again
	}
	return ctx.Err()
}

// markKey returns the Redis key of the mark id.
func (s *Store) markKey(id store.PoolID) string {
	return s.prefix + "keycap:mark:{" + id.String() + "}"
}

// Mark implements store.Store: one EVALSHA.
func (s *Store) Mark(ctx context.Context, id store.PoolID, ttl time.Duration) (time.Duration, bool, error) {
	age, err := markScript.Run(ctx, s.client, []string{s.markKey(id)}, ms(ttl)).Int64()
	if err != nil {
		s.failed(err)
		return 0, false, fmt.Errorf("redisstore: mark: %w", err)
	}
	if age < 0 { // this call started it
		return 0, true, nil
	}
	return time.Duration(age) * time.Millisecond, false, nil
}

// pauseKey returns the Redis key of the pause id.
func (s *Store) pauseKey(id store.PoolID) string {
	return s.prefix + "keycap:pause:{" + id.String() + "}"
}

// Pause implements store.Store: one EVALSHA. The pause is a key whose TTL
// is what remains of it.
func (s *Store) Pause(ctx context.Context, id store.PoolID, d time.Duration) (time.Duration, error) {
	left, err := pauseScript.Run(ctx, s.client, []string{s.pauseKey(id)}, ms(d)).Int64()
	if err != nil {
		s.failed(err)
		return 0, fmt.Errorf("redisstore: pause: %w", err)
	}
	return time.Duration(left) * time.Millisecond, nil
}

// Paused implements store.Store: one PTTL.
func (s *Store) Paused(ctx context.Context, id store.PoolID) (time.Duration, error) {
	left, err := s.client.PTTL(ctx, s.pauseKey(id)).Result()
	if err != nil {
		s.failed(err)
		return 0, fmt.Errorf("redisstore: paused: %w", err)
	}
	return max(left, 0), nil // -2: no pause; -1 cannot happen (pauses always expire)
}

// rateKey returns the key of the pace id, as given to go-redis/redis_rate
// (which puts "rate:" before it).
func (s *Store) rateKey(id store.PoolID) string {
	return s.prefix + "keycap:rate:{" + id.String() + "}"
}

// Pace implements store.Store with go-redis/redis_rate's GCRA script: one
// EVALSHA on one key, by Redis's clock.
func (s *Store) Pace(ctx context.Context, id store.PoolID, rate store.Rate) (time.Duration, error) {
	if !rate.Valid() {
		return 0, fmt.Errorf("redisstore: invalid rate %+v: events, period and burst must be positive", rate)
	}
	res, err := s.rates.Allow(ctx, s.rateKey(id), redis_rate.Limit{Rate: rate.Events, Period: rate.Period, Burst: rate.Burst})
	if err != nil {
		s.failed(err)
		return 0, fmt.Errorf("redisstore: pace: %w", err)
	}
	if res.Allowed > 0 {
		return 0, nil
	}
	return max(res.RetryAfter, time.Millisecond), nil
}
