package keycap

import (
	"sync"
	"sync/atomic"

	"github.com/keycap/keycap/store"
)

// waiters lets a release wake the Acquire calls of the same Limiter that wait
// for a slot of its pool, so that they need not wait for their next poll.
type waiters struct {
	n      atomic.Int32 // waiters registered; 0 makes wake free
	shards [waiterShards]waiterShard
}

const waiterShards = 16

type waiterShard struct {
	mu    sync.Mutex
	pools map[store.PoolID][]*waiter
}

// waiter is one waiting Acquire. ch holds at most one pending wake-up.
type waiter struct {
	ch    chan struct{}
	pools []store.PoolID
}

func (w *waiters) init() {
	for i := range w.shards {
		w.shards[i].pools = make(map[store.PoolID][]*waiter)
	}
}

func (w *waiters) shard(p store.PoolID) *waiterShard { return &w.shards[p[15]%waiterShards] }

// add registers a waiter on the pools of ls's slots.
func (w *waiters) add(ls *Lease) *waiter {
	wt := &waiter{ch: make(chan struct{}, 1), pools: make([]store.PoolID, len(ls.slots))}
	for i := range ls.slots {
		p := ls.slots[i].limit.pool
		wt.pools[i] = p
		sh := w.shard(p)
		sh.mu.Lock()
		sh.pools[p] = append(sh.pools[p], wt)
		sh.mu.Unlock()
	}
	w.n.Add(1)
	return wt
}

// remove unregisters wt. A wake-up it received but did not use is passed on,
// so that a slot freed for it is not left to the pollers.
func (w *waiters) remove(wt *waiter) {
	for _, p := range wt.pools {
		sh := w.shard(p)
		sh.mu.Lock()
		list := sh.pools[p]
		for i, x := range list {
			if x == wt {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(sh.pools, p)
		} else {
			sh.pools[p] = list
		}
		sh.mu.Unlock()
	}
	w.n.Add(-1)
	select {
	case <-wt.ch:
		for _, p := range wt.pools {
			w.wake(p)
		}
	default:
	}
}

// wake signals the first waiter on pool that has no wake-up pending.
func (w *waiters) wake(p store.PoolID) {
	if w.n.Load() == 0 {
		return
	}
	sh := w.shard(p)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, wt := range sh.pools[p] {
		select {
		case wt.ch <- struct{}{}:
			return
		default:
		}
	}
}
