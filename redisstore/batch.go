package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/store"
)

// Decisions bound for one Redis node travel together: every plain Acquire
// and Release, with or without a ticket, is an op on a queue of its node (one of lanes,
// chosen by the pool), and each queue sends what has gathered as one
// pipeline, one pipeline at a time. Nothing waits for company: an op that
// finds its queue idle is sent at once by its caller (one round trip, as
// unbatched), and the ops that arrive while a pipeline is in flight leave
// together when it returns. Under load a pipeline carries as many decisions
// as arrived during one round trip, so the rate of decisions is bounded by
// Redis's time per script, not by round trips.
//
// One pipeline at a time per queue, and one queue per pool, also keep a
// store's calls of a pool in order: a call made after another (a release,
// then an acquire of the same pool) reaches Redis after it, even when the
// first one's caller did not wait for its reply (ReleaseAsync).
//
// An op whose deadline passes unanswered says how long Redis had it
// (store.UnansweredError), so that the Limiter can tell a slow Redis from a
// process too starved to send its calls: the time since its pipeline was
// handed to the client, and the time it queued behind a pipeline in flight
// (Redis held the queue); not the time it waited for a sender to run.

// op is one call's commands, run in order in one pipeline.
type op struct {
	cmds   []redis.Cmder
	script bool // cmds[0] runs a script or a function: loaded and retried when Redis lacks it (missing)

	ctx      context.Context // the caller's, nil for an async op: an op whose caller left is not sent
	deadline time.Time       // an async op's: not sent after it

	done chan struct{} // closed once cmds hold their replies, when then is nil
	then func(o *op)   // else called, on the queue's goroutine; it must not block

	// For the account of an op that runs out of time (unanswered): when
	// it was queued, when its pipeline was handed to the client (0: not
	// yet), and the pipeline it waited behind until then (sent at
	// aheadSent, back at aheadLanded). All but queued are written under
	// its queue's lock.
	queued, sent, aheadSent, aheadLanded instant
}

// instant is a time since the package's epoch, as clock reads it: small
// enough to keep a few on every op.
type instant time.Duration

var epoch = time.Now()

func clock() instant { return instant(time.Since(epoch)) }

// instantOf returns t as an instant.
func instantOf(t time.Time) instant { return instant(t.Sub(epoch)) }

// failed returns why o is not worth sending: its caller left, or its
// deadline passed.
func (o *op) failed(now time.Time) error {
	if o.ctx != nil {
		return o.ctx.Err()
	}
	if !o.deadline.IsZero() && !now.Before(o.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// finish hands o's replies to its caller.
func (o *op) finish() {
	switch {
	case o.then != nil:
		o.then(o)
	case o.done != nil: // nil for an op its caller sent itself
		close(o.done)
	}
}

// err returns the first error among o's replies.
func (o *op) err() error { return errOf(o.cmds...) }

// wait waits for o's replies, or for ctx to end. Replies that are there
// when it ends are taken: a caller run late has them all the same.
func (o *op) wait(ctx context.Context) error {
	select {
	case <-o.done:
		return nil
	case <-ctx.Done():
		select {
		case <-o.done:
			return nil
		default:
			return ctx.Err()
		}
	}
}

// unanswered is the error of o, unanswered at deadline, err being what it
// met there: a *store.UnansweredError with how long, from its queuing to
// deadline, Redis had o or held its queue: while o waited behind a
// pipeline in flight, and since its own pipeline was handed to the client.
// Not the time o waited for a sender to run. q is locked, or o was sent.
func (o *op) unanswered(err error, deadline instant, q *queue) error {
	var had time.Duration
	if o.sent != 0 {
		had = overlap(o.queued, deadline, o.aheadSent, o.aheadLanded) + overlap(o.sent, deadline, o.sent, deadline)
	} else { // still queued
		had = overlap(o.queued, deadline, q.sent, q.landed)
		if q.flight != 0 {
			had += overlap(o.queued, deadline, q.flight, deadline)
		}
	}
	return &store.UnansweredError{Err: err, Outstanding: had}
}

// overlap returns how long the times from a0 to a1 and from b0 to b1
// share.
func overlap(a0, a1, b0, b1 instant) time.Duration {
	return max(time.Duration(min(a1, b1)-max(a0, b0)), 0)
}

// queue gathers the ops bound for one node.
type queue struct {
	s       *Store
	retired atomic.Bool // a lane of a cluster's single whose pools went to their nodes' queues (queues.of)

	mu      sync.Mutex
	ops     []*op
	running bool            // a sender (or a caller leading) has the queue
	pipe    redis.Pipeliner // used by whoever has the queue

	// flight is when the pipeline in flight was handed to the client (0:
	// none); sent and landed are when the last one that returned was, and
	// when it returned: the times Redis held the queue, for op.unanswered.
	flight, sent, landed instant
}

// land records that the pipeline in flight, if any, returned at now. q is
// locked.
func (q *queue) land(now instant) {
	if q.flight != 0 {
		q.sent, q.landed, q.flight = q.flight, now, 0
	}
}

// take takes the ops queued for a pipeline handed to the client at now,
// and records it in flight. q is locked.
func (q *queue) take(batch []*op, now instant) []*op {
	batch, q.ops = q.ops, batch[:0]
	for _, o := range batch {
		o.sent, o.aheadSent, o.aheadLanded = now, q.sent, q.landed
	}
	if len(batch) > 0 {
		q.flight = now
	}
	return batch
}

// lanes and clusterLanes are the numbers of queues of one Redis and of
// each node of a cluster, each queue with its own pipeline in flight, so
// that one batch's replies are read while Redis runs the next; a pool always
// takes the same lane, which keeps its calls in order. More lanes let more
// callers of a few pools lead their own ops; fewer make larger batches under
// load. Measured (BENCHMARKS.md, issue 16) at 8 and 64 goroutines among 1 to
// 16: 8 for one Redis (4 cost a third of the pairs/s at 8 goroutines, and
// nothing at 64), 4 a node on a 3-master cluster (8 cost a fifth at 64).
var lanes, clusterLanes = 8, 4

// queues maps a cluster's slot ranges to their queues.
type queues struct {
	single []queue // a single Redis, a Sentinel's master, a Ring; a cluster's until its ranges are known

	mu     sync.RWMutex
	byName map[string][]queue
}

func (qs *queues) init(s *Store) {
	n := lanes
	if s.cluster != nil {
		n = clusterLanes // until the slot ranges are known
	}
	qs.single = newLanes(s, n)
}

func newLanes(s *Store, n int) []queue {
	q := make([]queue, n)
	for i := range q {
		q[i].s = s
	}
	return q
}

func lane(q []queue, pool store.PoolID) *queue { return &q[int(pool[14])%len(q)] }

// of returns the queue of pool's node, locked: the caller queues its op
// and unlocks it.
//
// Until a cluster's slot ranges are known (they are read in the background
// after New), its pools share the lanes of single. A pool leaves its lane
// there for its node's queue only when that lane is idle, and the lane is
// then retired: an op of the pool still queued or in flight in it would
// otherwise race the pool's next op on the other queue, and a release
// could reach Redis after the acquire that was to find its slot free.
// Under load that never lets a lane idle, its pools stay on it: in order,
// but in pipelines that span nodes.
func (qs *queues) of(s *Store, pool store.PoolID) *queue {
	q := lane(qs.single, pool)
	if s.cluster == nil {
		q.mu.Lock()
		return q
	}
	slot := slotOf(pool)
	if !q.retired.Load() {
		q.mu.Lock()
		// The ranges are read under the lock, so that an op queued here
		// while they were unknown keeps the lane busy, and unretired,
		// until it is sent.
		if !q.retired.Load() {
			if q.running || s.slots.of(slot) == "" {
				return q
			}
			q.retired.Store(true)
		}
		q.mu.Unlock()
	}
	name := s.slots.of(slot)
	if name == "" { // a slot that no range serves (a cluster being resharded)
		q.mu.Lock()
		return q
	}
	qs.mu.RLock()
	named := qs.byName[name]
	qs.mu.RUnlock()
	if named == nil {
		qs.mu.Lock()
		if named = qs.byName[name]; named == nil {
			if qs.byName == nil {
				qs.byName = make(map[string][]queue)
			}
			named = newLanes(s, clusterLanes)
			qs.byName[name] = named
		}
		qs.mu.Unlock()
	}
	q = lane(named, pool)
	q.mu.Lock()
	return q
}

// submit queues o, and starts the queue's sender unless it runs.
func (q *queue) submit(o *op) {
	q.mu.Lock()
	q.enqueue(o)
}

// enqueue is submit on a locked queue, which it unlocks.
func (q *queue) enqueue(o *op) {
	if o.queued == 0 {
		o.queued = clock()
	}
	q.ops = append(q.ops, o)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go q.run()
	}
}

// lead sends o at once, in the caller's goroutine and with its context,
// when the locked queue q is idle (an op alone needs no sender), and then
// starts the sender for what gathered meanwhile. Otherwise it queues o and
// reports false. It unlocks q.
func (q *queue) lead(ctx context.Context, o *op) bool {
	if q.running {
		o.done = make(chan struct{}) // only a queued op is waited for
		q.ops = append(q.ops, o)
		q.mu.Unlock()
		return false
	}
	q.running = true
	if q.pipe == nil {
		q.pipe = q.s.client.Pipeline()
	}
	pipe := q.pipe
	o.sent, q.flight = o.queued, o.queued
	q.mu.Unlock()
	_ = pipe.BatchProcess(context.Background(), o.cmds...)
	one := [1]*op{o}
	q.exec(ctx, pipe, one[:])
	q.mu.Lock()
	q.land(clock())
	if len(q.ops) == 0 {
		q.running = false
		q.mu.Unlock()
		return true
	}
	q.mu.Unlock()
	go q.run()
	return true
}

// run sends what has gathered, one pipeline at a time, until nothing is
// left.
func (q *queue) run() {
	q.mu.Lock()
	if q.pipe == nil {
		q.pipe = q.s.client.Pipeline()
	}
	pipe := q.pipe
	q.mu.Unlock()
	var batch []*op
	for {
		q.mu.Lock()
		now := time.Now()
		q.land(instantOf(now)) // the last pipeline, whose replies were handed out
		batch = q.take(batch, instantOf(now))
		if len(batch) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		q.send(pipe, batch, now)
		clear(batch)
	}
}

// send runs batch's ops in one pipeline, handed to the client at now, and
// finishes each.
func (q *queue) send(pipe redis.Pipeliner, batch []*op, now time.Time) {
	var latest time.Time
	bounded := true
	live := batch[:0]
	for _, o := range batch {
		if err := o.failed(now); err != nil {
			if o.ctx == nil && errors.Is(err, context.DeadlineExceeded) {
				err = o.unanswered(err, instantOf(o.deadline), q) // o.sent is set
			}
			for _, c := range o.cmds {
				c.SetErr(err)
			}
			o.finish()
			continue
		}
		live = append(live, o)
		dl, ok := o.deadline, !o.deadline.IsZero()
		if o.ctx != nil {
			dl, ok = o.ctx.Deadline()
		}
		if !ok {
			bounded = false
		} else if dl.After(latest) {
			latest = dl
		}
		_ = pipe.BatchProcess(context.Background(), o.cmds...)
	}
	if len(live) == 0 {
		return
	}
	// The pipeline ends when its last caller stops waiting; one that waits
	// without a deadline is bounded by the client's read and write timeouts.
	ctx, cancel := context.Background(), noCancel
	if bounded {
		ctx, cancel = context.WithDeadline(ctx, latest)
	}
	defer cancel()
	q.exec(ctx, pipe, live)
}

// exec runs the commands of ops, queued in pipe, and finishes each op.
func (q *queue) exec(ctx context.Context, pipe redis.Pipeliner, ops []*op) {
	_, _ = pipe.Exec(ctx)
	var again []*op
	for _, o := range ops {
		if o.script && q.s.missing(o.cmds[0]) {
			again = append(again, o)
			continue
		}
		o.finish()
	}
	if len(again) == 0 {
		return
	}
	// Redis lost its scripts (a restart, SCRIPT FLUSH, FUNCTION FLUSH) or
	// never had them: load them, and try the ops that met it once more.
	if err := q.s.loadScripts(ctx); err != nil {
		for _, o := range again {
			o.cmds[0].SetErr(errors.Join(o.cmds[0].Err(), err))
			o.finish()
		}
		return
	}
	for _, o := range again {
		q.s.fit(o.cmds[0])
		for _, c := range o.cmds {
			c.SetErr(nil)
		}
		_ = pipe.BatchProcess(context.Background(), o.cmds...)
	}
	_, _ = pipe.Exec(ctx)
	for _, o := range again {
		o.finish()
	}
}

func noCancel() {}

// do runs cmds, in order, in the next pipeline to pool's node, and waits
// for their replies or for ctx to end. script says that cmds[0] runs a
// script or a function (Store.script).
func (s *Store) do(ctx context.Context, pool store.PoolID, script bool, cmds ...redis.Cmder) error {
	return s.run(ctx, pool, &op{cmds: cmds, script: script})
}

// run runs o's commands as do does. A call whose deadline passes
// unanswered returns a *store.UnansweredError (op.unanswered).
func (s *Store) run(ctx context.Context, pool store.PoolID, o *op) error {
	o.ctx = ctx
	o.queued = clock()
	q := s.queues.of(s, pool)
	if !q.lead(ctx, o) {
		if err := o.wait(ctx); err != nil {
			return q.unanswered(ctx, o, err)
		}
	}
	if o.err() != nil {
		// The pipeline lasts until its last caller's deadline: when it
		// failed at or past ours, report our context's end, as a call made
		// with ctx would (its timer may lag the pipeline's by a moment).
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			<-ctx.Done()
			return q.unanswered(ctx, o, ctx.Err())
		}
	}
	return nil
}

// unanswered returns err, the end of ctx that o's caller met, as o's
// *store.UnansweredError when it is ctx's deadline.
func (q *queue) unanswered(ctx context.Context, o *op, err error) error {
	dl, ok := ctx.Deadline()
	if !ok || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return o.unanswered(err, instantOf(dl), q)
}
