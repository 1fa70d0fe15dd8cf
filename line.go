package keycap

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/keycap/keycap/store"
)

// linePoll is how soon a caller waiting in a store's line asks again when
// no notification came: the fallback for a lost one. Each poll that finds
// nothing doubles the next, up to maxLinePoll, so that thousands of
// waiters do not cost the store thousands of calls a second; a waiter's
// ticket lives two polls (and a claim), so a waiter that died leaves the
// line within 2 × maxLinePoll + handoffClaim. A waiter on a store that
// cannot notify polls every 100 ms ± 50 % instead.
const (
	linePoll    = time.Second
	maxLinePoll = 8 * time.Second
)

// handoffClaim is how long a slot handed to a waiting Acquire stays
// reserved for it before it passes to the next ticket, where the waiter
// must claim it (a store that does not notify; a parked or named caller): a
// waiter is woken at once by a notification. When one is lost, the slot
// passes on after the claim, and the waiter, whose ticket went with the
// handoff, queues again at its next poll (within maxLinePoll). A store's
// reconnection, the way notifications are lost, wakes every waiter
// (store.Store.Notify).
//
// A waiter that notifications reach takes the slot handed to it as its
// lease, with no call to the store (see handoffs): its ticket asks for the
// slot to be handed as a whole lease (claimLease: the limit's TTL), so a
// slot handed to a waiter that died comes back within the TTL, as a dead
// holder's does.
const handoffClaim = 1500 * time.Millisecond

// claimLease in a Ticket's Claim asks take to hand the slot as a lease of
// the limit's own TTL.
const claimLease = -1

// handoffs records the pool whose slot a store's notification says was
// handed to a waiter by name, so that the waiter holds it without asking
// the store again: the handoff is the grant. Only a handoff announced after
// the waiter's last call was sent counts (reset before each call), and only
// while a third of the TTL has not passed since that call: the store made
// the lease after that call reached it, for the TTL, so it lives at least
// until that call's start plus the TTL, and the keeper renews it at a third,
// as any lease. (A notification delayed by more than a TTL, on a connection
// that delivers it at last, could announce a lease that has lapsed; that is
// the delay every lease assumes its holder does not suffer.)
type handoffs struct {
	mu   sync.Mutex
	pool store.PoolID
	ok   bool
	wake chan struct{}
}

// waiter returns the lineWaiter that records the handoffs and wakes.
func (h *handoffs) waiter() *lineWaiter {
	return &lineWaiter{fn: func(p store.PoolID, named bool) {
		if named {
			h.mu.Lock()
			h.pool, h.ok = p, true
			h.mu.Unlock()
		}
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}}
}

// reset forgets the handoffs announced so far.
func (h *handoffs) reset() {
	h.mu.Lock()
	h.ok = false
	h.mu.Unlock()
}

// handed reports whether a slot of pool p was handed since the last reset.
func (h *handoffs) handed(p store.PoolID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok && h.pool == p
}

// lineLinger is how long a Limiter keeps its store subscription to a pool
// after its last waiter left, so that a busy pool is not subscribed to anew
// by every waiter.
const lineLinger = 30 * time.Second

// waitInLine takes ls's slots on a store with lines, waiting up to wait: its
// slots are taken in the order of their pools' IDs, the same for every
// caller so that two waiters never hold what the other waits for; a slot
// taken is held while the caller queues for the next one, with a ticket in
// that pool's line. It is woken by the store's notification, and polls as a
// fallback.
//
// With park, a caller that is still refused when its wait ends parks
// instead of leaving the line (frontdoor.AcquireOrPark).
func (l *Limiter) waitInLine(ctx context.Context, ls *Lease, wait, start time.Duration, park *parking) (*Lease, error) {
	var one [1]int
	order := one[:]
	if len(ls.slots) > 1 {
		order = make([]int, len(ls.slots))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int {
			return cmp.Compare(string(ls.slots[a].limit.pool[:]), string(ls.slots[b].limit.pool[:]))
		})
	}
	wake := make(chan struct{}, 1)
	h := &handoffs{wake: wake}
	w := h.waiter()
	// The handoff is the grant when the slot it names is the last one ls
	// needs (those before it are held) and the caller is neither parked
	// nor named (whose next try, under the same owner, claims it), and
	// asks for no fencing token (which only a claim brings back).
	direct := park == nil && !ls.named && !ls.fenced()
	// ... and when every ticket of this wait asked for a whole lease: a
	// slot handed to a ticket with a claim window may have lapsed and
	// passed on before its notification arrives.
	whole := true
	// Where this Limiter already watches the pool's line, the waiter joins
	// before its first try. Elsewhere the first try goes alone, so that a
	// caller served at once costs no subscription; a refused one subscribes
	// and then tries again at once, which claims a slot handed to it before
	// the subscription began.
	notified := l.lines.watchReady(ls, w)
	subscribe := !notified && l.has(store.Notifications)
	defer l.lines.unwatch(ls, w)

	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	now := start
	poll := linePoll
	for {
		left := wait - (now - start)
		tk := store.Ticket{TTL: min(max(left, 0), 2*poll) + handoffClaim, Claim: handoffClaim}
		if direct && (notified || subscribe) {
			tk.Claim = claimLease // (a first try alone is claimed by the try after it subscribes)
		}
		if park != nil && left <= 0 {
			tk = store.Ticket{TTL: park.For, Claim: park.Claim} // parks in the same call
		}
		whole = whole && tk.Claim == claimLease
		h.reset()
		refused, err := l.take(ctx, ls, order, now, tk)
		if err != nil {
			return nil, err
		}
		if refused < 0 {
			l.admit(ctx, ls, now-start)
			return ls, nil
		}
		if subscribe {
			subscribe = false
			notified = l.lines.watch(ctx, ls, w)
			now = l.now()
			continue
		}
		waited := l.precise() - start
		if waited >= wait && park != nil && left > 0 {
			now = l.now() // once more, with the parking ticket
			continue
		}
		if waited >= wait && park != nil {
			claim, parked := l.parkIn(ctx, ls, refused, park, wake)
			if claim {
				continue // handed a slot meanwhile: claim it
			}
			lim := &ls.slots[refused].limit
			l.refused(ctx, lim, waited)
			return nil, &LimitError{Limit: *lim, Waited: waited, Parked: parked}
		}
		if waited >= wait {
			l.undo(ls, refused, true, false)
			lim := &ls.slots[refused].limit
			l.refused(ctx, lim, waited)
			return nil, &LimitError{Limit: *lim, Waited: waited}
		}
		d := poll
		if !notified {
			d = l.poll()
		}
		d = min(d, wait-waited)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			l.undo(ls, refused, true, false)
			return nil, ctx.Err()
		case <-wake:
		case <-timer.C:
			if notified {
				poll = min(2*poll, maxLinePoll)
			}
		}
		if s := &ls.slots[refused]; direct && whole && refused == order[len(order)-1] &&
			h.handed(s.limit.home()) && l.precise() <= now+s.limit.spec.TTL/3 {
			s.held = true
			if s.limit.spec.Parent != nil {
				s.since = l.now()
			}
			s.renewAt, s.deadline = now+s.limit.spec.TTL/3, now+s.limit.spec.TTL
			l.admit(ctx, ls, l.now()-start)
			return ls, nil
		}
		now = l.now()
	}
}

// parking is how a caller that cannot wait in place (a job that goes back
// to its queue) keeps its place in a line (frontdoor.AcquireOrPark).
type parking struct {
	// Owner names the caller on each of its attempts, so that the attempt
	// that comes back claims the slot handed to its ticket.
	Owner store.Owner
	// For is how long the ticket waits for its owner to come back: the
	// caller's fallback delay, after which it tries again anyway.
	For time.Duration
	// Claim is how long a slot handed to the ticket stays reserved for the
	// owner, the time it needs to come back once woken.
	Claim time.Duration
	// Wake is called, once, in a goroutine of its own, when a slot is
	// handed to the ticket: it makes the caller come back now (for a job,
	// River's JobRetry, asynq's RunTask).
	Wake func()
}

// parkIn parks ls's owner in slot i's line: the line's handoff now calls
// p.Wake, and the slots ls holds are released. It reports claim when a slot
// was handed to the owner before the watch changed hands (the caller claims
// it, its slots still held), and parked when the owner is parked: without a
// subscription nobody would wake it, so it leaves the line instead.
func (l *Limiter) parkIn(ctx context.Context, ls *Lease, i int, p *parking, wake <-chan struct{}) (claim, parked bool) {
	lim := ls.slots[i].limit
	w := l.parked.add(ls.owner, lim.home(), p)
	watched := l.lines.watchPool(ctx, &lim, ls.owner, w)
	select {
	case <-wake:
		l.parked.cancel(ls.owner)
		return true, false
	default:
	}
	if !watched {
		l.parked.cancel(ls.owner)
		l.undo(ls, i, true, false)
		return false, false
	}
	// Released before returning: the caller's next attempt, with the same
	// owner, must not find a release of this one still on its way.
	for j := range ls.slots {
		if s := &ls.slots[j]; s.held && j != i {
			l.releaseSlot(ls.owner, s)
			s.held = false
		}
	}
	return false, true
}

// parked holds a Limiter's parked callers, by owner.
type parked struct {
	l      *Limiter
	mu     sync.Mutex
	m      map[store.Owner]*parkEntry
	closed bool
}

type parkEntry struct {
	pool  store.PoolID
	w     *lineWaiter
	timer *time.Timer
}

func (pk *parked) init(l *Limiter) {
	pk.l = l
	pk.m = make(map[store.Owner]*parkEntry)
}

// add parks owner on pool until p.For passes or a handoff wakes it, and
// returns the waiter to watch the line with.
func (pk *parked) add(owner store.Owner, pool store.PoolID, p *parking) *lineWaiter {
	e := &parkEntry{pool: pool, w: &lineWaiter{}}
	wakeFn := p.Wake
	e.w.fn = func(store.PoolID, bool) { // under the lines' lock: must not block
		if pk.take(owner, e) {
			go func() {
				pk.l.lines.unwatchOne(e.pool, owner, e.w)
				wakeFn()
			}()
		}
	}
	pk.mu.Lock()
	if pk.closed {
		pk.mu.Unlock()
		return e.w
	}
	old := pk.m[owner]
	pk.m[owner] = e
	e.timer = time.AfterFunc(p.For, func() {
		if pk.take(owner, e) {
			pk.l.lines.unwatchOne(e.pool, owner, e.w)
		}
	})
	pk.mu.Unlock()
	if old != nil {
		old.timer.Stop()
		pk.l.lines.unwatchOne(old.pool, owner, old.w)
	}
	return e.w
}

// take removes e if it is still owner's parking, and reports whether it was.
func (pk *parked) take(owner store.Owner, e *parkEntry) bool {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.m[owner] != e {
		return false
	}
	delete(pk.m, owner)
	if e.timer != nil {
		e.timer.Stop()
	}
	return true
}

// cancel unparks owner, if parked.
func (pk *parked) cancel(owner store.Owner) {
	pk.mu.Lock()
	e := pk.m[owner]
	pk.mu.Unlock()
	if e != nil && pk.take(owner, e) {
		pk.l.lines.unwatchOne(e.pool, owner, e.w)
	}
}

// close unparks everyone: nobody will be woken by this Limiter any more.
func (pk *parked) close() {
	pk.mu.Lock()
	pk.closed = true
	for o, e := range pk.m {
		if e.timer != nil {
			e.timer.Stop()
		}
		delete(pk.m, o)
	}
	pk.mu.Unlock()
}

// lines holds a Limiter's store subscriptions (Notify), one per pool that
// has waiters, and routes each handoff to the waiter that holds the ticket.
type lines struct {
	l      *Limiter
	mu     sync.Mutex
	pools  map[store.PoolID]*line
	closed bool
}

// line is the subscription to one pool.
type line struct {
	ready   chan struct{} // closed once Notify returned
	err     error         // Notify's error: the pool's waiters poll
	stop    func()
	waiters map[store.Owner]*lineWaiter
	idle    *time.Timer // running while the line has no waiter
}

// lineWaiter is what a notification of pool calls: named when the store
// named its owner among those handed a slot, not when it wakes everyone
// (a reconnection). It must not block.
type lineWaiter struct {
	fn func(pool store.PoolID, named bool)
}

func (ls *lines) init(l *Limiter) {
	ls.l = l
	ls.pools = make(map[store.PoolID]*line)
}

// watch subscribes ls's owner to the handoffs of each of its pools, and
// reports whether notifications flow for all of them: when not, the
// waiter must poll. It returns once the store confirmed every subscription,
// so that no handoff to a ticket taken after it is missed.
func (ls *lines) watch(ctx context.Context, lease *Lease, w *lineWaiter) bool {
	if !ls.l.has(store.Notifications) {
		return false
	}
	all := true
	for i := range lease.slots {
		if !ls.watchPool(ctx, &lease.slots[i].limit, lease.owner, w) {
			all = false
		}
	}
	return all
}

// watchReady subscribes lease's owner to the pools whose lines this
// Limiter already watches, at no cost, and reports whether that is all of
// them.
func (ls *lines) watchReady(lease *Lease, w *lineWaiter) bool {
	if !ls.l.has(store.Notifications) {
		return false
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	all := !ls.closed
	for i := range lease.slots {
		ln := ls.pools[lease.slots[i].limit.home()]
		if ln == nil {
			all = false
			continue
		}
		select {
		case <-ln.ready:
			if ln.err != nil {
				all = false
				continue
			}
		default:
			all = false
			continue
		}
		if ln.idle != nil {
			ln.idle.Stop()
			ln.idle = nil
		}
		ln.waiters[lease.owner] = w
	}
	return all
}

func (ls *lines) watchPool(ctx context.Context, lim *Limit, owner store.Owner, w *lineWaiter) bool {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return false
	}
	pool := lim.home()
	ln := ls.pools[pool]
	if ln == nil {
		ln = &line{ready: make(chan struct{}), waiters: make(map[store.Owner]*lineWaiter)}
		ls.pools[pool] = ln
		ln.waiters[owner] = w
		ls.mu.Unlock()
		var stop func()
		err := ls.l.run(ctx, ls.l.budgetOf(lim), func(ctx context.Context) error {
			var err error
			stop, err = ls.l.store.Notify(ctx, pool, func(g []store.Owner) { ls.deliver(pool, g) })
			return err
		})
		ls.mu.Lock()
		ln.stop, ln.err = stop, err
		if err != nil && ls.pools[pool] == ln {
			delete(ls.pools, pool) // the next waiter tries again
		}
		closed := ls.closed
		ls.mu.Unlock()
		close(ln.ready)
		if closed && stop != nil {
			stop() // outside the lock: a store's stop may wait for its own callbacks
			return false
		}
		return err == nil
	}
	if ln.idle != nil {
		ln.idle.Stop()
		ln.idle = nil
	}
	ln.waiters[owner] = w
	ls.mu.Unlock()
	select {
	case <-ln.ready:
		return ln.err == nil
	case <-ctx.Done():
		return false
	}
}

// unwatch removes lease's owner from its pools' lines; a line left without
// waiters is unsubscribed from after lineLinger.
func (ls *lines) unwatch(lease *Lease, w *lineWaiter) {
	if !ls.l.has(store.Notifications) {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for i := range lease.slots {
		ls.unwatchPool(lease.slots[i].limit.home(), lease.owner, w)
	}
}

// unwatchPool removes w from p's line; the caller holds ls.mu.
func (ls *lines) unwatchPool(p store.PoolID, owner store.Owner, w *lineWaiter) {
	ln := ls.pools[p]
	if ln == nil || ln.waiters[owner] != w {
		return
	}
	delete(ln.waiters, owner)
	if len(ln.waiters) == 0 && ln.idle == nil && !ls.closed {
		ln.idle = time.AfterFunc(lineLinger, func() { ls.drop(p, ln) })
	}
}

// unwatchOne removes w from p's line.
func (ls *lines) unwatchOne(p store.PoolID, owner store.Owner, w *lineWaiter) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.unwatchPool(p, owner, w)
}

// drop ends the subscription of an idle line.
func (ls *lines) drop(p store.PoolID, ln *line) {
	ls.mu.Lock()
	if ls.pools[p] != ln || len(ln.waiters) > 0 {
		ls.mu.Unlock()
		return
	}
	delete(ls.pools, p)
	ls.mu.Unlock()
	<-ln.ready
	if ln.stop != nil {
		ln.stop()
	}
}

// deliver wakes the waiters handed a slot of p; none named wakes them all.
func (ls *lines) deliver(p store.PoolID, granted []store.Owner) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.pools[p]
	if ln == nil {
		return
	}
	if len(granted) == 0 {
		for _, w := range ln.waiters {
			w.fn(p, false)
		}
		return
	}
	for _, o := range granted {
		if w, ok := ln.waiters[o]; ok {
			w.fn(p, true)
		}
	}
}

// close ends every subscription.
func (ls *lines) close() {
	ls.mu.Lock()
	ls.closed = true
	pools := ls.pools
	ls.pools = make(map[store.PoolID]*line)
	ls.mu.Unlock()
	for _, ln := range pools {
		if ln.idle != nil {
			ln.idle.Stop()
		}
		select {
		case <-ln.ready:
			if ln.stop != nil {
				ln.stop()
			}
		default: // its watchPool stops it when Notify returns
		}
	}
}
