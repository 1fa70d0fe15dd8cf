package keycap

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap/store"
)

// keeper renews a Limiter's held leases: one goroutine for all of them, which
// wakes when the earliest slot is due (at a third of its TTL) and renews every
// slot due by then in one Store.Renew batch.
type keeper struct {
	l      *Limiter
	shards [keeperShards]keeperShard
	wake   chan struct{}
	next   atomic.Int64 // when the loop will next look, on the Limiter's clock

	started atomic.Bool // fast path of ensureRunning
	mu      sync.Mutex
	running bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}

	work  []renewRef // reused by the loop
	batch []store.Renewal
}

// keeperShards spreads the set of held leases over several locks, so that
// concurrent acquires and releases seldom meet.
const keeperShards = 32

// keeperShard holds a doubly linked list of leases, linked through the
// leases themselves: adding and removing cost no allocation and no hashing.
type keeperShard struct {
	mu   sync.Mutex
	head *Lease
	_    [64 - 16]byte // keep shards on separate cache lines
}

type renewRef struct {
	ls *Lease
	i  int // index of the slot in ls.slots
}

func (k *keeper) init(l *Limiter) {
	k.l = l
	k.wake = make(chan struct{}, 1)
	k.stop = make(chan struct{})
	k.done = make(chan struct{})
	k.next.Store(math.MaxInt64)
}

func (k *keeper) shard(ls *Lease) *keeperShard {
	return &k.shards[ls.owner[15]%keeperShards]
}

// add starts renewing ls.
func (k *keeper) add(ls *Lease) {
	earliest := time.Duration(math.MaxInt64)
	for i := range ls.slots {
		if s := &ls.slots[i]; s.held {
			earliest = min(earliest, s.renewAt)
		}
	}
	if earliest == math.MaxInt64 {
		return // nothing to renew: every limit failed open
	}
	sh := k.shard(ls)
	sh.mu.Lock()
	ls.next = sh.head
	if sh.head != nil {
		sh.head.prev = ls
	}
	sh.head, ls.listed = ls, true
	sh.mu.Unlock()
	k.ensureRunning()
	if int64(earliest) < k.next.Load() {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// remove stops renewing ls.
func (k *keeper) remove(ls *Lease) {
	sh := k.shard(ls)
	sh.mu.Lock()
	if ls.listed {
		if ls.prev != nil {
			ls.prev.next = ls.next
		} else {
			sh.head = ls.next
		}
		if ls.next != nil {
			ls.next.prev = ls.prev
		}
		ls.prev, ls.next, ls.listed = nil, nil, false
	}
	sh.mu.Unlock()
}

func (k *keeper) ensureRunning() {
	if k.started.Load() {
		return
	}
	k.mu.Lock()
	if !k.running && !k.stopped {
		k.running = true
		go k.run()
	}
	k.started.Store(true)
	k.mu.Unlock()
}

func (k *keeper) close() {
	k.mu.Lock()
	k.stopped = true
	running := k.running
	k.mu.Unlock()
	if running {
		close(k.stop)
		<-k.done
	}
	k.expireHeld()
}

// expireHeld makes the leases still held after Close report themselves lost
// when their slots expire in the store: nothing renews them any more.
func (k *keeper) expireHeld() {
	now := k.l.now()
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		for ls := sh.head; ls != nil; ls = ls.next {
			ls.mu.Lock()
			deadline := time.Duration(math.MaxInt64)
			for j := range ls.slots {
				if s := &ls.slots[j]; s.held && !s.lost {
					deadline = min(deadline, s.deadline)
				}
			}
			ls.mu.Unlock()
			if deadline == math.MaxInt64 {
				continue
			}
			time.AfterFunc(max(deadline-now, 0), func() {
				ls.mu.Lock()
				var ch chan struct{}
				if !ls.released {
					for j := range ls.slots {
						if s := &ls.slots[j]; s.held && !s.lost && s.deadline == deadline {
							if c := ls.markLost(s); c != nil {
								ch = c
							}
						}
					}
				}
				ls.mu.Unlock()
				if ch != nil {
					close(ch)
				}
			})
		}
		sh.mu.Unlock()
	}
}

func (k *keeper) run() {
	defer close(k.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// Until the scan below is over, any lease added must wake the loop.
		k.next.Store(math.MaxInt64)
		next := k.collect(k.l.now())
		if len(k.work) > 0 {
			k.renew()
			select {
			case <-k.stop:
				return
			default:
				continue // look again: renewed slots are due later now
			}
		}
		k.next.Store(int64(next))
		if next != math.MaxInt64 {
			timer.Reset(max(next-k.l.now(), 0))
		} else {
			timer.Stop()
		}
		select {
		case <-k.stop:
			return
		case <-k.wake:
		case <-timer.C:
		}
	}
}

// collect gathers in k.work every slot due for renewal at now, or within a
// quarter of its renewal interval (so that slots due close together share a
// round trip), and returns when the next of the others is due.
func (k *keeper) collect(now time.Duration) time.Duration {
	k.work = k.work[:0]
	next := time.Duration(math.MaxInt64)
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		for ls := sh.head; ls != nil; ls = ls.next {
			ls.mu.Lock()
			for j := range ls.slots {
				s := &ls.slots[j]
				switch {
				case !s.held || s.lost || ls.released:
				case s.renewAt-s.limit.spec.TTL/12 <= now:
					k.work = append(k.work, renewRef{ls, j})
					ls.pins++ // not reused until renew is done with it
				default:
					next = min(next, s.renewAt)
				}
			}
			ls.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	return next
}

// answeredIn adds pool to the pools whose partitions answered a renewal,
// while an outage is under way (otherwise there is nothing to end), one pool
// per partition.
func (l *Limiter) answeredIn(pools []store.PoolID, pool store.PoolID) []store.PoolID {
	if !l.outages.any() {
		return pools
	}
	part := l.partition(pool)
	for _, p := range pools {
		if l.partition(p) == part {
			return pools
		}
	}
	return append(pools, pool)
}

// renew renews the slots in k.work in one batch and records the outcome.
func (k *keeper) renew() {
	l := k.l
	k.batch = k.batch[:0]
	for _, w := range k.work {
		s := &w.ls.slots[w.i]
		r := store.Renewal{Pool: s.limit.pool, Owner: w.ls.owner, TTL: s.limit.spec.TTL}
		if !s.limit.plain() {
			r.Weight = s.limit.spec.Weight
			if p := s.limit.spec.Parent; p != nil {
				r.Parent = p.pool
			}
		}
		k.batch = append(k.batch, r)
	}
	before := l.now()
	err := l.run(context.Background(), max(l.budget, time.Second), func(ctx context.Context) error {
		return l.store.Renew(ctx, k.batch)
	})
	after := l.now()

	type failure struct {
		lim Limit
		err error
	}
	var failures []failure      // one per partition
	var answered []store.PoolID // a pool per partition that answered, to end its outage
	var lost []Event
	var wake []chan struct{}
	for i, w := range k.work {
		ls, s, r := w.ls, &w.ls.slots[w.i], &k.batch[i]
		rerr := err
		if rerr == nil {
			rerr = r.Err
		}
		ls.mu.Lock()
		ls.pins--
		switch {
		case ls.released:
		case rerr != nil:
			part, known := l.partition(s.limit.home()), false
			for _, f := range failures {
				known = known || l.partition(f.lim.home()) == part
			}
			if !known {
				failures = append(failures, failure{s.limit, rerr})
			}
			if after >= s.deadline {
				// Not renewed in time: the store has let it go by now.
				if ch := ls.markLost(s); ch != nil {
					wake = append(wake, ch)
				}
				lost = append(lost, Event{Kind: LeaseLost, Limit: s.limit, Held: after - ls.acquired})
			} else {
				s.renewAt = after + max(s.limit.spec.TTL/6, time.Millisecond)
			}
		case r.Lost:
			if ch := ls.markLost(s); ch != nil {
				wake = append(wake, ch)
			}
			lost = append(lost, Event{Kind: LeaseLost, Limit: s.limit, Held: after - ls.acquired})
			answered = l.answeredIn(answered, s.limit.home())
		default:
			s.renewAt, s.deadline = before+s.limit.spec.TTL/3, before+s.limit.spec.TTL
			answered = l.answeredIn(answered, s.limit.home())
		}
		ls.mu.Unlock()
	}
	// Observers are called with no lock held.
	for _, f := range failures {
		l.storeFailed(&f.lim, f.err)
	}
	for _, p := range answered {
		l.storeAnswered(p)
	}
	for _, e := range lost {
		l.emit(e)
	}
	for _, ch := range wake {
		close(ch)
	}
	clear(k.work) // drop references to leases
	clear(k.batch)
}
