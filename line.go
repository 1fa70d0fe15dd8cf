package keycap

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// LinePoll is how often a caller waiting in a store's line (a Liner) asks
// again when no notification came: the fallback for a lost one. A waiter
// on a store that cannot notify polls every 100 ms ± 50 % instead.
const LinePoll = time.Second

// HandoffClaim is how long a slot handed to a waiting Acquire stays
// reserved for it before it passes to the next ticket: a waiter is woken at
// once by a notification, and by its next poll (LinePoll) when one was lost.
const HandoffClaim = 1500 * time.Millisecond

// lineLinger is how long a Limiter keeps its store subscription to a pool
// after its last waiter left, so that a busy pool is not subscribed to anew
// by every waiter.
const lineLinger = 30 * time.Second

// waitInLine takes ls's slots on a Liner store, waiting up to wait: its
// slots are taken in the order of their pools' IDs, the same for every
// caller so that two waiters never hold what the other waits for; a slot
// taken is held while the caller queues for the next one, with a ticket in
// that pool's line. It is woken by the store's notification, and polls as a
// fallback.
func (l *Limiter) waitInLine(ctx context.Context, ls *Lease, wait, start time.Duration) (*Lease, error) {
	order := make([]int, len(ls.slots))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Compare(string(ls.slots[a].limit.pool[:]), string(ls.slots[b].limit.pool[:]))
	})
	wake := make(chan struct{}, 1)
	notified := l.lines.watch(ctx, ls, wake)
	defer l.lines.unwatch(ls, wake)

	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	now := start
	for {
		left := wait - (now - start)
		tk := Ticket{TTL: min(max(left, 0), 2*LinePoll) + HandoffClaim, Claim: HandoffClaim}
		refused, err := l.tryLine(ctx, ls, order, now, tk)
		if err != nil {
			return nil, err
		}
		if refused < 0 {
			l.admit(ls, now-start)
			return ls, nil
		}
		waited := l.now() - start
		if waited >= wait {
			l.leaveLine(ls, refused)
			lim := ls.slots[refused].limit
			l.emit(Event{Kind: LimitExceeded, Limit: lim, Waited: waited})
			return nil, &LimitError{Limit: lim, Waited: waited}
		}
		d := LinePoll
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
			l.leaveLine(ls, refused)
			return nil, ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		now = l.now()
	}
}

// tryLine queues for ls's slots in order until one refuses, and returns
// that slot's index (which now holds a ticket), or -1 when every slot is
// held or skipped by a failing-open store. The slots taken stay held. On
// an error, every slot is released and the ticket dropped.
func (l *Limiter) tryLine(ctx context.Context, ls *Lease, order []int, now time.Duration, tk Ticket) (int, error) {
	for _, i := range order {
		s := &ls.slots[i]
		bctx, cancel := l.bound(ctx, l.budgetOf(s.limit))
		ok, _, err := l.liner.Queue(bctx, s.limit.pool, ls.owner, s.limit.max, s.limit.ttl, tk)
		cancel()
		if err != nil {
			s.held = true // the store may have granted it, or queued
			if ctxErr := ctx.Err(); ctxErr != nil {
				l.leaveLine(ls, i)
				return 0, ctxErr
			}
			if bctx.Err() != nil {
				err = &BudgetError{Budget: l.budgetOf(s.limit), Err: err}
			}
			l.storeFailed(s.limit, err)
			if l.failModeOf(s.limit) == FailClosed {
				l.leaveLine(ls, i)
				return 0, &StoreError{Limit: s.limit, Err: err}
			}
			l.dequeueLater(s.limit, ls.owner)
			s.held = false // runs unguarded for this limit
			continue
		}
		l.storeAnswered(s.limit.pool)
		if !ok {
			s.held = false
			return i, nil
		}
		s.held = true
		s.renewAt, s.deadline = now+s.limit.ttl/3, now+s.limit.ttl
	}
	return -1, nil
}

// leaveLine gives up a wait: it releases the slots ls holds and takes its
// ticket out of the line of slot i (and frees a slot handed to it), in the
// background, within the budget.
func (l *Limiter) leaveLine(ls *Lease, i int) {
	for j := range ls.slots {
		if s := &ls.slots[j]; s.held && j != i {
			l.releaseLater(s.limit, ls.owner)
			s.held = false
		}
	}
	ls.slots[i].held = false
	l.dequeueLater(ls.slots[i].limit, ls.owner)
}

// dequeueLater takes owner's ticket out of lim's line in the background,
// within the budget.
func (l *Limiter) dequeueLater(lim Limit, owner Owner) {
	go func() {
		ctx, cancel := l.bound(context.Background(), l.budgetOf(lim))
		defer cancel()
		_ = l.liner.Dequeue(ctx, lim.pool, owner)
	}()
}

// lines holds a Limiter's store subscriptions (Notifier), one per pool that
// has waiters, and routes each handoff to the waiter that holds the ticket.
type lines struct {
	l      *Limiter
	mu     sync.Mutex
	pools  map[PoolID]*line
	closed bool
}

// line is the subscription to one pool.
type line struct {
	ready   chan struct{} // closed once Notify returned
	err     error         // Notify's error: the pool's waiters poll
	stop    func()
	waiters map[Owner]chan<- struct{}
	idle    *time.Timer // running while the line has no waiter
}

func (ls *lines) init(l *Limiter) {
	ls.l = l
	ls.pools = make(map[PoolID]*line)
}

// watch subscribes ls's owner to the handoffs of each of its pools, and
// reports whether notifications flow for all of them: when not, the
// waiter must poll. It returns once the store confirmed every subscription,
// so that no handoff to a ticket taken after it is missed.
func (ls *lines) watch(ctx context.Context, lease *Lease, wake chan<- struct{}) bool {
	if ls.l.notifier == nil {
		return false
	}
	all := true
	for i := range lease.slots {
		if !ls.watchPool(ctx, lease.slots[i].limit, lease.owner, wake) {
			all = false
		}
	}
	return all
}

func (ls *lines) watchPool(ctx context.Context, lim Limit, owner Owner, wake chan<- struct{}) bool {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return false
	}
	ln := ls.pools[lim.pool]
	if ln == nil {
		ln = &line{ready: make(chan struct{}), waiters: make(map[Owner]chan<- struct{})}
		ls.pools[lim.pool] = ln
		ln.waiters[owner] = wake
		ls.mu.Unlock()
		bctx, cancel := ls.l.bound(ctx, ls.l.budgetOf(lim))
		stop, err := ls.l.notifier.Notify(bctx, lim.pool, func(g []Owner) { ls.deliver(lim.pool, g) })
		cancel()
		ls.mu.Lock()
		ln.stop, ln.err = stop, err
		if err != nil && ls.pools[lim.pool] == ln {
			delete(ls.pools, lim.pool) // the next waiter tries again
		}
		if ls.closed && stop != nil {
			stop()
		}
		ls.mu.Unlock()
		close(ln.ready)
		return err == nil
	}
	if ln.idle != nil {
		ln.idle.Stop()
		ln.idle = nil
	}
	ln.waiters[owner] = wake
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
func (ls *lines) unwatch(lease *Lease, wake chan<- struct{}) {
	if ls.l.notifier == nil {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for i := range lease.slots {
		p := lease.slots[i].limit.pool
		ln := ls.pools[p]
		if ln == nil || ln.waiters[lease.owner] != wake {
			continue
		}
		delete(ln.waiters, lease.owner)
		if len(ln.waiters) == 0 && ln.idle == nil && !ls.closed {
			ln.idle = time.AfterFunc(lineLinger, func() { ls.drop(p, ln) })
		}
	}
}

// drop ends the subscription of an idle line.
func (ls *lines) drop(p PoolID, ln *line) {
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
func (ls *lines) deliver(p PoolID, granted []Owner) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.pools[p]
	if ln == nil {
		return
	}
	signal := func(ch chan<- struct{}) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	if len(granted) == 0 {
		for _, ch := range ln.waiters {
			signal(ch)
		}
		return
	}
	for _, o := range granted {
		if ch, ok := ln.waiters[o]; ok {
			signal(ch)
		}
	}
}

// close ends every subscription.
func (ls *lines) close() {
	ls.mu.Lock()
	ls.closed = true
	pools := ls.pools
	ls.pools = make(map[PoolID]*line)
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
