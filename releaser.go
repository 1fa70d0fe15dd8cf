package keycap

import (
	"context"
	"sync"
	"time"

	"github.com/keycap/keycap/store"
)

// maxPendingReleases bounds the releases a Limiter retries: past it, a
// failed release is left to its lease's TTL, as before.
const maxPendingReleases = 100_000

// releaser retries, in the background, the releases that the store failed:
// a store that comes back from an outage, or fails a call now and then, must
// not keep the slots of holders that are done until their TTL runs out — a
// burst of failed releases during a restart would otherwise fill pools for a
// whole TTL. A release is retried with a growing interval until it succeeds
// or its lease would have expired anyway.
type releaser struct {
	l     *Limiter
	async bool // the store releases without its caller waiting (store.AsyncRelease)

	// Releases sent with ReleaseAsync and not answered yet: Close waits for
	// them.
	inflightMu sync.Mutex
	inflight   int
	due        time.Duration // when the last release sent is due, answered or not (its budget ends)
	drained    chan struct{} // closed when inflight falls to 0 after Close began

	mu      sync.Mutex
	pending []pendingRelease
	running bool
	stopped bool
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

type pendingRelease struct {
	limit Limit
	owner store.Owner
	until time.Duration // when the lease expires in the store: no use retrying after
}

func (r *releaser) init(l *Limiter) {
	r.l = l
	r.async = l.has(store.AsyncRelease)
	r.wake = make(chan struct{}, 1)
	r.stop = make(chan struct{})
	r.done = make(chan struct{})
}

// retry queues a failed release of owner's lease of lim, which expires in
// the store at until.
func (r *releaser) retry(lim Limit, owner store.Owner, until time.Duration) {
	r.mu.Lock()
	if r.stopped || len(r.pending) >= maxPendingReleases {
		r.mu.Unlock()
		return
	}
	r.pending = append(r.pending, pendingRelease{lim, owner, until})
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if start {
		go r.loop()
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *releaser) loop() {
	defer close(r.done)
	backoff := 50 * time.Millisecond
	t := time.NewTimer(backoff)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if r.flush() {
			backoff = 50 * time.Millisecond
		} else {
			backoff = min(2*backoff, 2*time.Second)
		}
		t.Reset(backoff)
	}
}

// flush tries the pending releases in turn and keeps those that failed and
// are still worth retrying; after a failure it tries no more (a store that
// is down would cost each one its budget) and keeps the rest for the next
// round. It reports whether all succeeded.
func (r *releaser) flush() bool {
	r.mu.Lock()
	batch := r.pending
	r.pending = nil
	r.mu.Unlock()
	if len(batch) == 0 {
		return true
	}
	l := r.l
	var again []pendingRelease
	now := l.now()
	for i, p := range batch {
		if now >= p.until {
			continue // expired in the store by now
		}
		if err := l.release(context.Background(), &p.limit, p.owner, false, 0); err != nil {
			again = append(again, batch[i:]...)
			break
		}
		l.waiters.wake(p.limit.pool)
	}
	r.mu.Lock()
	r.pending = append(again, r.pending...)
	r.mu.Unlock()
	return len(again) == 0
}

// send frees owner's slot of lim, which expires in the store at until,
// without waiting for the store's answer: a failure is retried as one that
// was waited for, and local waiters are woken once the slot is free.
func (r *releaser) send(lim Limit, owner store.Owner, until time.Duration) {
	l := r.l
	budget := l.budgetOf(&lim)
	r.inflightMu.Lock()
	r.inflight++
	r.due = max(r.due, l.now()+budget)
	r.inflightMu.Unlock()
	sent := l.precise()
	d := lim.demand()
	d.Shared = l.shared(&lim)
	l.store.ReleaseAsync(lim.pool, owner, d, budget, func(err error) {
		if waited := l.precise() - sent; err != nil && waited >= budget {
			// The store kept the budget (end's "late"); the verdict on
			// whom to blame is the failure policy's.
			err = overBudget(budget, waited, err)
		}
		if l.account(context.Background(), &lim, err) != nil {
			r.retry(lim, owner, until)
		}
		l.waiters.wake(lim.pool)
		r.inflightMu.Lock()
		r.inflight--
		if r.inflight == 0 && r.drained != nil {
			close(r.drained)
			r.drained = nil
		}
		r.inflightMu.Unlock()
	})
}

// drainGrace is how long past the last release's budget Close waits for
// the store to answer it.
const drainGrace = time.Second

// drain waits for the releases in flight: each is answered, or fails,
// within its budget. It waits no longer than the last one's budget and
// drainGrace: a store that breaks its word leaves them to their TTL.
func (r *releaser) drain() {
	r.inflightMu.Lock()
	if r.inflight == 0 {
		r.inflightMu.Unlock()
		return
	}
	ch := make(chan struct{})
	r.drained = ch
	wait := r.due - r.l.now() + drainGrace
	r.inflightMu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// close stops the loop after one last try of what is pending.
func (r *releaser) close() {
	r.drain()
	r.mu.Lock()
	r.stopped = true
	running := r.running
	r.mu.Unlock()
	if running {
		close(r.stop)
		<-r.done
		r.flush()
	}
}
