package memstore

import (
	"time"

	"github.com/keycap/keycap/store"
)

// parent is a total shared by the pools of its keys (its kids), kept in the
// shard of the parent's pool: every decision on a kid locks that one shard.
type parent struct {
	max   int
	held  int                   // slots held by every kid
	seq   uint64                // the last arrival in a kid's line
	next  time.Duration         // no lease expires before: nothing to drop
	kids  map[store.PoolID]*kid // kids with a lease or a ticket
	lined map[store.PoolID]*kid // kids with a ticket
}

// kid is one key's pool in a parent.
type kid struct {
	pool
	share, min int
}

// before reports whether a is served before b: a key below its minimum
// first, then the key holding fewest slots for its share (its minimum,
// below it). Ties go to neither.
func (a *kid) before(b *kid) (first, tie bool) {
	ah, bh := a.held(), b.held()
	aBelow, bBelow := ah < a.min, bh < b.min
	if aBelow != bBelow {
		return aBelow, false
	}
	aw, bw := a.share, b.share
	if aBelow {
		aw, bw = a.min, b.min
	}
	x, y := ah*bw, bh*aw // ah/aw against bh/bw
	return x < y, x == y
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
		pa = &parent{kids: make(map[store.PoolID]*kid), lined: make(map[store.PoolID]*kid)}
		sh.parents[d.Shared.Parent.Pool] = pa
	}
	pa.max = d.Shared.Parent.Max
	pa.expire(now) // before the kid is looked up: it drops empty kids
	k := pa.kids[d.Pool]
	if k == nil {
		k = &kid{}
		pa.kids[d.Pool] = k
	}
	k.max, k.share, k.min = d.Max, max(d.Shared.Parent.Share, 1), d.Shared.Parent.Min
	granted := pa.fill(now)
	ok, ahead := pa.take(d, k, t, now)
	sh.mu.Unlock()
	s.hub.notify(d.Shared.Parent.Pool, granted)
	return store.Grant{Granted: ok, Ahead: ahead}
}

// take grants d to k, or queues it with t: the caller has dropped the
// parent's expired leases and filled its free slots.
func (pa *parent) take(d demand, k *kid, t *store.Ticket, now time.Duration) (bool, int) {
	w := d.Weight()
	if i := k.find(d.Owner); i >= 0 {
		k.leases[i].expires = now + d.TTL
		pa.dequeue(d.Pool, k, d.Owner)
		return true, 0
	}
	if len(k.line) == 0 && k.takeKept(w) {
		k.add(lease{owner: d.Owner, expires: now + d.TTL, weight: w})
		pa.next = min(pa.next, now+d.TTL)
		return true, 0
	}
	if len(k.line) == 0 && k.held()+w <= k.max && pa.held+w <= pa.max && pa.first(k, now) {
		k.add(lease{owner: d.Owner, expires: now + d.TTL, weight: w})
		pa.held += w
		pa.next = min(pa.next, now+d.TTL)
		return true, 0
	}
	if t == nil {
		return false, 0
	}
	for i := range k.line {
		if k.line[i].owner == d.Owner {
			k.line[i].expires, k.line[i].claim, k.line[i].weight = now+t.TTL, t.Claim, w
			return false, i
		}
	}
	pa.seq++
	k.line = append(k.line, ticket{owner: d.Owner, expires: now + t.TTL, claim: t.Claim, weight: w, seq: pa.seq})
	pa.lined[d.Pool] = k
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

// keep keeps w slots that k freed for k until expires, when keys wait, k
// has no line, and k would be served first if it asked again. It reports
// whether it did; the caller has dropped the expired leases.
func (pa *parent) keep(k *kid, w int, now, expires time.Duration) bool {
	if len(pa.lined) == 0 || len(k.line) > 0 {
		return false
	}
	b := pa.best(now)
	if b == nil || b == k {
		return false
	}
	if first, _ := k.before(b); !first {
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

// first reports whether a fresh caller of k comes before every waiting key
// that could be served (a tie goes to the waiter, who came first).
func (pa *parent) first(k *kid, now time.Duration) bool {
	if len(pa.lined) == 0 {
		return true
	}
	b := pa.best(now)
	if b == nil || b == k {
		return b == nil
	}
	first, _ := k.before(b)
	return first
}

// best returns the waiting kid the next free slot goes to: among those
// whose head ticket fits their own max, the one served first, the oldest
// head on a tie. It drops the expired tickets it meets at the heads.
func (pa *parent) best(now time.Duration) *kid {
	var b *kid
	for id, k := range pa.lined {
		for len(k.line) > 0 && (k.line[0].expires <= now || k.find(k.line[0].owner) >= 0) {
			k.line = k.line[1:]
		}
		if len(k.line) == 0 {
			k.line = nil
			delete(pa.lined, id)
			continue
		}
		if k.held()+max(k.line[0].weight, 1) > k.max {
			continue
		}
		if b == nil {
			b = k
			continue
		}
		if first, tie := k.before(b); first || tie && k.line[0].seq < b.line[0].seq {
			b = k
		}
	}
	return b
}

// fill hands the parent's free slots to the waiting kids, by the fair
// share, and returns the owners served. The best kid's head ticket waits
// until its weight fits: nobody overtakes it. The caller has dropped the
// expired leases.
func (pa *parent) fill(now time.Duration) []store.Owner {
	var granted []store.Owner
	for len(pa.lined) > 0 {
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
		if len(k.line) == 0 {
			k.line = nil
			for id, kk := range pa.lined {
				if kk == k {
					delete(pa.lined, id)
				}
			}
		}
		k.add(lease{owner: t.owner, expires: now + t.claim, weight: w})
		pa.held += w
		pa.next = min(pa.next, now+t.claim)
		granted = append(granted, t.owner)
	}
	return granted
}

// expire drops the expired leases of every kid, and the kids left with
// nothing, once a lease may have expired.
func (pa *parent) expire(now time.Duration) {
	if now < pa.next {
		return
	}
	next := time.Duration(1<<63 - 1)
	for id, k := range pa.kids {
		pa.held -= k.expire(now)
		for _, l := range k.leases {
			next = min(next, l.expires)
		}
		if len(k.leases) == 0 && len(k.line) == 0 {
			delete(pa.kids, id)
		}
	}
	pa.next = next
}

// dequeue takes owner's ticket out of k's line.
func (pa *parent) dequeue(id store.PoolID, k *kid, owner store.Owner) {
	k.dequeue(owner)
	if len(k.line) == 0 {
		delete(pa.lined, id)
	}
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
		var now time.Duration
		if len(pa.lined) > 0 { // only then is the clock read
			now = s.clock()
			pa.expire(now)
		}
		if k := pa.kids[d.Pool]; k != nil {
			if dequeue {
				pa.dequeue(d.Pool, k, d.Owner)
			}
			if i := k.find(d.Owner); i >= 0 {
				w := k.leases[i].slots()
				pa.held -= w
				k.remove(i)
				if !dequeue && d.Shared.Parent.Keep > 0 && len(pa.lined) > 0 {
					kept = pa.keep(k, w, now, now+d.Shared.Parent.Keep)
				}
			}
		}
		if len(pa.lined) > 0 {
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
	sh.mu.Unlock()
	s.hub.notify(d.Pool, granted)
	return store.Grant{Granted: ok, Ahead: ahead}
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
		}
	}
}
