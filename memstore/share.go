package memstore

import (
	"container/heap"
	"time"

	"github.com/keycap/keycap/store"
)

// parent is a total shared by the pools of its keys (its kids), kept in the
// shard of the parent's pool: every decision on a kid locks that one shard.
//
// The kids whose head ticket can be served wait in a heap, best first
// (the order of store.Shares): a decision reads the top and fixes the one
// kid it changed, O(log n) in the kids waiting.
type parent struct {
	max   int
	held  int                   // slots held by every kid
	seq   uint64                // the last arrival in a kid's line
	next  time.Duration         // no lease expires before: nothing to drop
	kids  map[store.PoolID]*kid // kids with a lease, a ticket or a debt
	queue queue                 // kids whose head ticket fits their own max
	vnow  float64               // virtual time: the slot-time of the last key served
}

// forgetAfter is how long a key that holds nothing and waits for nothing
// keeps its account (store.Shares): a key that comes back after that starts
// from the parent's time, and keys that never come back cost nothing.
const forgetAfter = 10 * time.Second

// kid is one key's pool in a parent.
type kid struct {
	pool
	share, min int
	vt         float64       // virtual time: slot-time received per share, in ms
	at         int           // index in the parent's queue, -1 when out
	idle       time.Duration // since when it holds nothing and waits for nothing; 0: not idle
	// starts holds when each lease began, for its slot-time when its
	// release does not say it (store.Demand.Held). Beside the leases, not
	// in them: a plain pool's leases stay small.
	starts map[store.Owner]time.Duration
}

// started records that owner's lease began at now.
func (k *kid) started(owner store.Owner, now time.Duration) {
	if k.starts == nil {
		k.starts = make(map[store.Owner]time.Duration)
	}
	k.starts[owner] = now
}

// forget drops the starts of leases k no longer holds.
func (k *kid) forget() {
	if len(k.starts) <= len(k.leases) {
		return
	}
	for o := range k.starts {
		if k.find(o) < 0 {
			delete(k.starts, o)
		}
	}
}

// rank is the order in which keys are served (store.Shares): a key below
// its minimum first, by its slots for its minimum; then by its slots for its
// share; then by the slot-time it received for its share.
type rank struct {
	below bool
	x, vt float64
}

// rank returns k's rank, for a virtual time of vt.
func (k *kid) rank(vt float64) rank {
	if h := k.held(); h < k.min {
		return rank{true, float64(h) / float64(k.min), vt}
	}
	return rank{false, float64(k.held()) / float64(k.share), vt}
}

// ahead reports whether a key of rank a is served before one of rank b,
// and whether they tie.
func ahead(a, b rank) (first, tie bool) {
	switch {
	case a.below != b.below:
		return a.below, false
	case a.x != b.x:
		return a.x < b.x, false
	}
	return a.vt < b.vt, a.vt == b.vt
}

// queue is a heap of kids, best first: the best rank, the oldest head
// ticket on a tie.
type queue []*kid

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if first, tie := ahead(q[i].rank(q[i].vt), q[j].rank(q[j].vt)); !tie {
		return first
	}
	return q[i].line[0].seq < q[j].line[0].seq
}
func (q queue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].at, q[j].at = i, j
}
func (q *queue) Push(x any) {
	k := x.(*kid)
	k.at = len(*q)
	*q = append(*q, k)
}
func (q *queue) Pop() any {
	old := *q
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	k.at = -1
	return k
}

// ms converts d to milliseconds, the unit of virtual time in every store.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// grant adds a lease of w slots for owner to k. A key served is at the
// parent's virtual time at least (it keeps no credit from the time it held
// more than others), and the parent's time moves to the key's.
func (pa *parent) grant(k *kid, owner store.Owner, w int, now, expires time.Duration) {
	k.add(lease{owner: owner, expires: expires, weight: w})
	k.started(owner, now)
	k.idle = 0
	pa.held += w
	pa.next = min(pa.next, expires)
	k.vt = max(k.vt, pa.vnow)
	pa.vnow = k.vt
}

// settle charges k the slot-time of a lease of w slots held for held, but
// never puts k more than that ahead of the parent's virtual time: slots a
// key borrowed while nobody else waited are not paid back later. A lease
// that lapses is not charged: its holder is gone.
func (pa *parent) settle(k *kid, w int, held time.Duration) {
	c := float64(w) * ms(max(held, 0)) / float64(k.share)
	k.vt = min(k.vt, pa.vnow) + c
}

// place puts k in the queue, moves it, or takes it out, after anything
// that changed its rank or its head: it drops the expired tickets at the
// head of k's line first.
func (pa *parent) place(k *kid, now time.Duration) {
	for len(k.line) > 0 && (k.line[0].expires <= now || k.find(k.line[0].owner) >= 0) {
		k.line = k.line[1:]
	}
	if len(k.line) == 0 {
		k.line = nil
	}
	serve := len(k.line) > 0 && k.held()+max(k.line[0].weight, 1) <= k.max
	switch {
	case serve && k.at < 0:
		heap.Push(&pa.queue, k)
	case serve:
		heap.Fix(&pa.queue, k.at)
	case k.at >= 0:
		heap.Remove(&pa.queue, k.at)
	}
}

// acquireShared is Acquire for a demand with a weight or a parent; t is
// its ticket, nil for none.
func (s *Store) acquireShared(d demand, t *store.Ticket) store.Grant {
	if !d.HasParent() {
		return s.acquireWeighted(d, t)
	}
	now := s.clock()
	sh := s.shard(d.Shared.Parent.Pool)
	sh.mu.Lock()
	sh.maybeSweep(now)
	pa := sh.parents[d.Shared.Parent.Pool]
	if pa == nil {
		pa = &parent{kids: make(map[store.PoolID]*kid)}
		sh.parents[d.Shared.Parent.Pool] = pa
	}
	pa.max = d.Shared.Parent.Max
	pa.expire(now) // before the kid is looked up: it drops empty kids
	k := pa.kids[d.Pool]
	if k == nil {
		k = &kid{at: -1, vt: pa.vnow}
		pa.kids[d.Pool] = k
	}
	if k.max != d.Max || k.share != max(d.Shared.Parent.Share, 1) || k.min != d.Shared.Parent.Min {
		k.max, k.share, k.min = d.Max, max(d.Shared.Parent.Share, 1), d.Shared.Parent.Min
		pa.place(k, now)
	} else if t != nil && k.at < 0 && len(k.line) > 0 {
		// A waiter's call places its key first: a head that its own max
		// held back and that expired since (its caller gone) changes
		// nothing by itself, and the ticket behind it would wait for one
		// of the key's leases to end. This call's fill serves it.
		pa.place(k, now)
	}
	granted := pa.fill(now)
	ok, ahead := pa.take(d, k, t, now)
	token := s.token(ok, d.Fence)
	sh.mu.Unlock()
	s.hub.notify(d.Shared.Parent.Pool, granted)
	return store.Grant{Granted: ok, Ahead: ahead, Token: token}
}

// take grants d to k, or queues it with t: the caller has dropped the
// parent's expired leases and filled its free slots.
func (pa *parent) take(d demand, k *kid, t *store.Ticket, now time.Duration) (bool, int) {
	w := d.Weight()
	if i := k.find(d.Owner); i >= 0 {
		k.leases[i].expires = now + d.TTL
		k.dequeue(d.Owner)
		pa.place(k, now)
		return true, 0
	}
	if len(k.line) == 0 && k.takeKept(w) {
		k.add(lease{owner: d.Owner, expires: now + d.TTL, weight: w})
		k.started(d.Owner, now)
		k.idle = 0
		pa.next = min(pa.next, now+d.TTL)
		return true, 0
	}
	if len(k.line) == 0 && k.held()+w <= k.max && pa.held+w <= pa.max && pa.first(k, now) {
		k.vt = max(k.vt, pa.vnow)
		pa.grant(k, d.Owner, w, now, now+d.TTL)
		return true, 0
	}
	if t == nil {
		return false, 0
	}
	for i := range k.line {
		if k.line[i].owner == d.Owner {
			k.line[i].expires, k.line[i].claim, k.line[i].weight = now+t.TTL, t.Claim, w
			if i == 0 {
				pa.place(k, now)
			}
			return false, i
		}
	}
	if len(k.line) == 0 {
		k.vt = max(k.vt, pa.vnow) // no credit banked while it did not wait
		k.idle = 0
	}
	pa.seq++
	k.line = append(k.line, ticket{owner: d.Owner, expires: now + t.TTL, claim: t.Claim, weight: w, seq: pa.seq})
	if len(k.line) == 1 {
		pa.place(k, now)
	}
	return false, len(k.line) - 1
}

// takeKept takes w slots kept for k (WithKeep) off their KeptFor lease,
// for its caller's lease, and reports whether there were so many. The
// caller has dropped the expired leases.
func (k *kid) takeKept(w int) bool {
	i := k.find(store.KeptFor)
	if i < 0 || k.leases[i].slots() < w {
		return false
	}
	if k.leases[i].slots() == w {
		k.remove(i)
	} else {
		k.leases[i].weight -= w
		k.extra -= w
	}
	return true
}

// keep keeps w slots that k freed for k until expires, when another key
// waits with a live ticket, k has no line, and k would be served first if
// it asked again. It reports whether it did; the caller has dropped the
// expired leases.
func (pa *parent) keep(k *kid, w int, now, expires time.Duration) bool {
	if len(k.line) > 0 || pa.best(now) == nil { // best passes the expired heads
		return false
	}
	if !pa.first(k, now) {
		return false
	}
	if i := k.find(store.KeptFor); i >= 0 {
		k.leases[i].weight = k.leases[i].slots() + w
		k.leases[i].expires = expires
		k.extra += w
	} else {
		k.add(lease{owner: store.KeptFor, expires: expires, weight: w})
	}
	pa.held += w
	pa.next = min(pa.next, expires)
	return true
}

// first reports whether a fresh caller of k, which has no line, comes
// before every waiting key that could be served (a tie goes to the waiter,
// who came first).
func (pa *parent) first(k *kid, now time.Duration) bool {
	b := pa.best(now)
	if b == nil {
		return true
	}
	if b == k {
		return false
	}
	first, _ := ahead(k.rank(max(k.vt, pa.vnow)), b.rank(b.vt))
	return first
}

// best returns the waiting kid the next free slot goes to, the top of the
// queue, dropping the expired tickets it meets at the heads.
func (pa *parent) best(now time.Duration) *kid {
	for len(pa.queue) > 0 {
		k := pa.queue[0]
		h := &k.line[0]
		if h.expires > now && k.find(h.owner) < 0 {
			return k
		}
		pa.place(k, now)
	}
	return nil
}

// fill hands the parent's free slots to the waiting kids, best first, and
// returns the owners served. The best kid's head ticket waits until its
// weight fits: nobody overtakes it. The caller has dropped the expired
// leases.
func (pa *parent) fill(now time.Duration) []store.Owner {
	var granted []store.Owner
	for {
		k := pa.best(now)
		if k == nil {
			break
		}
		t := k.line[0]
		w := max(t.weight, 1)
		if pa.held+w > pa.max {
			break
		}
		k.line = k.line[1:]
		pa.grant(k, t.owner, w, now, now+t.claim)
		pa.place(k, now)
		granted = append(granted, t.owner)
	}
	return granted
}

// expire drops the expired leases of every kid, and the kids left with
// nothing, once a lease may have expired: one walk of the kids, at most
// once per lease lifetime.
func (pa *parent) expire(now time.Duration) {
	if now < pa.next {
		return
	}
	next := time.Duration(1<<63 - 1)
	for id, k := range pa.kids {
		if n := k.expire(now); n > 0 {
			pa.held -= n
			k.forget()
			if len(k.line) > 0 {
				pa.place(k, now)
			}
		}
		for _, l := range k.leases {
			next = min(next, l.expires)
		}
		if len(k.leases) == 0 && len(k.line) == 0 {
			if k.idle == 0 {
				k.idle = now
			}
			if k.vt <= pa.vnow || now-k.idle >= forgetAfter {
				delete(pa.kids, id) // nothing held, waited for, or owed lately
			}
		}
	}
	pa.next = next
}

// live reports whether the parent holds a live lease or ticket.
func (pa *parent) live(now time.Duration) bool {
	for _, k := range pa.kids {
		for _, l := range k.leases {
			if l.expires > now {
				return true
			}
		}
		for _, t := range k.line {
			if t.expires > now {
				return true
			}
		}
	}
	return false
}

// releaseShared is Release for a demand with a weight or a parent.
func (s *Store) releaseShared(d demand, dequeue bool) bool {
	if !d.HasParent() {
		if dequeue {
			s.dequeue(d.Pool, d.Owner)
		} else {
			s.release(d.Pool, d.Owner)
		}
		return false
	}
	kept := false
	sh := s.shard(d.Shared.Parent.Pool)
	sh.mu.Lock()
	var granted []store.Owner
	if pa := sh.parents[d.Shared.Parent.Pool]; pa != nil {
		now := s.clock()
		// The lapsed leases first, whether or not a key waits in the
		// queue: a key whose head its own max held back joins it when its
		// lease lapses (cheap unless a lease may have: pa.next).
		pa.expire(now)
		if k := pa.kids[d.Pool]; k != nil {
			if dequeue {
				k.dequeue(d.Owner)
			}
			if i := k.find(d.Owner); i >= 0 {
				l := k.leases[i]
				w := l.slots()
				pa.held -= w
				k.remove(i)
				held := d.Held
				if held <= 0 {
					held = now - k.starts[d.Owner]
				}
				delete(k.starts, d.Owner)
				pa.settle(k, w, held)
				if !dequeue && d.Shared.Parent.Keep > 0 {
					kept = pa.keep(k, w, now, now+d.Shared.Parent.Keep)
				}
			}
			if k.at >= 0 || len(k.line) > 0 {
				pa.place(k, now)
			} else if len(k.leases) == 0 && k.idle == 0 {
				k.idle = now
			}
		}
		if len(pa.queue) > 0 {
			granted = pa.fill(now)
		}
	}
	sh.mu.Unlock()
	s.hub.notify(d.Shared.Parent.Pool, granted)
	return kept
}

// acquireWeighted is acquireShared for a pool with no parent: the pool's
// plain leases count one slot each beside the weighted ones.
func (s *Store) acquireWeighted(d demand, t *store.Ticket) store.Grant {
	now := s.clock()
	sh := s.shard(d.Pool)
	sh.mu.Lock()
	sh.maybeSweep(now)
	pl := sh.pools[d.Pool]
	if pl == nil {
		pl = &pool{}
		sh.pools[d.Pool] = pl
	}
	w := d.Weight()
	ok, granted := pl.acquire(d.Owner, w, d.Max, now, now+d.TTL)
	ahead := 0
	switch {
	case ok && t != nil:
		pl.dequeue(d.Owner)
	case !ok && t != nil:
		ahead = pl.queue(ticket{owner: d.Owner, expires: now + t.TTL, claim: t.Claim, weight: w})
	}
	token := s.token(ok, d.Fence)
	sh.mu.Unlock()
	s.hub.notify(d.Pool, granted)
	return store.Grant{Granted: ok, Ahead: ahead, Token: token}
}

// renewKid is Renew for a lease of a parent's kid.
func (s *Store) renewKid(r *store.Renewal, now time.Duration) {
	sh := s.shard(r.Parent)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r.Lost = true
	pa := sh.parents[r.Parent]
	if pa == nil {
		return
	}
	k := pa.kids[r.Pool]
	if k == nil {
		return
	}
	if j := k.find(r.Owner); j >= 0 {
		if k.leases[j].expires > now {
			k.leases[j].expires = now + r.TTL
			r.Lost = false
		} else {
			pa.held -= k.leases[j].slots()
			k.remove(j)
			delete(k.starts, r.Owner)
			if len(k.line) > 0 {
				pa.place(k, now)
			}
		}
	}
}
