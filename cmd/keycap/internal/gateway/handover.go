package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap/store"
)

// handover is the store of a configuration that replaced another one's store
// (a reload that changed the store section) while requests and WebSockets
// that started on the old configuration still hold slots in the old store.
// Until the last of them ends, every slot is taken in both stores: in the old
// one, so that the holders it still counts keep the cap exact across the
// switch, and in the new one, which counts alone afterwards. The old store's
// failures are ignored: the new store decides (the old one is often replaced
// because it is failing).
//
// It embeds the new store, so it has the new store's features, and every
// call it does not change (notifications, inspection, overrides,
// partitions, marks, pauses) goes to the new store alone: a handover onto a
// store without lines or shares declares none, and the Limiter asks it for
// none. It masks off two promises it cannot keep (Features): calls that
// wait on nothing outside the process, when the old store does, and pinned
// slots, which the old store would count with a TTL nobody renews.
type handover struct {
	store.Store // the new store
	prev        store.Store
	active      atomic.Bool

	mu     sync.Mutex
	inPrev map[leaseRef]struct{} // leases also taken in prev
}

type leaseRef struct {
	pool  store.PoolID
	owner store.Owner
}

func newHandover(next, prev store.Store) *handover {
	h := &handover{Store: next, prev: prev, inPrev: map[leaseRef]struct{}{}}
	h.active.Store(true)
	return h
}

// Features returns the new store's features, but InProcess when the old
// store waits on a network (its calls are bounded by prevBudget, not by the
// decision budget a Limiter gives only a store that blocks) and Pinned.
func (h *handover) Features() store.Features {
	f := h.Store.Features() &^ store.Pinned
	if !h.prev.Features().Has(store.InProcess) {
		f &^= store.InProcess
	}
	return f
}

// end stops taking slots in the old store, once nothing that started on the
// old configuration holds one there.
func (h *handover) end() { h.active.Store(false) }

// prevBudget bounds every call to the old store: it must not slow the new
// one down for long.
const prevBudget = 250 * time.Millisecond

// forPrev returns d as the old store takes it: a lease with no ticket (the
// new store's line decides who is next), never pinned, and kept for nobody.
// ok is false when the old store cannot count it (a weight or a parent on a
// store without shares): the new store then decides alone.
func (h *handover) forPrev(d store.Demand) (store.Demand, bool) {
	d.Line, d.Pinned = store.Ticket{}, false
	if d.Shared != nil && d.Shared.Parent.Keep != 0 {
		sh := *d.Shared // the Limiter's, shared by every demand of the limit: not changed
		sh.Parent.Keep = 0
		d.Shared = &sh
	}
	return d, d.Plain() || h.prev.Features().Has(store.Shares)
}

// Acquire takes d in the old store first, while the handover lasts: a
// refusal there refuses (the cap holds across the switch); a failure there
// is ignored.
func (h *handover) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	took := false
	if pd, ok := h.forPrev(d); ok && h.active.Load() {
		pctx, cancel := context.WithTimeout(ctx, prevBudget)
		g, err := h.prev.Acquire(pctx, pool, owner, pd)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return store.Grant{}, ctx.Err()
		case err == nil && !g.Granted:
			return store.Grant{}, nil // the old store is full
		}
		took = err == nil
	}
	g, err := h.Store.Acquire(ctx, pool, owner, d)
	switch {
	case took && err == nil && g.Granted:
		h.mu.Lock()
		h.inPrev[leaseRef{pool, owner}] = struct{}{}
		h.mu.Unlock()
	case took:
		h.releasePrev(pool, owner, d)
	}
	return g, err
}

// Release frees d in both stores.
func (h *handover) Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	if h.forget(pool, owner) {
		h.releasePrev(pool, owner, d)
	}
	return h.Store.Release(ctx, pool, owner, d, leave)
}

// ReleaseAsync releases d in both stores without waiting for the new one;
// its promise (a later call is applied after the release) holds in each:
// the old store's release goes first, sent the same way when that store
// releases without waiting too, and waited for (within prevBudget) when it
// does not. Its outcome is ignored, as every call to the old store's is.
// The Limiter calls it only when the new store declares AsyncRelease.
func (h *handover) ReleaseAsync(pool store.PoolID, owner store.Owner, d store.Demand, budget time.Duration, done func(error)) {
	if h.forget(pool, owner) {
		if pd, ok := h.forPrev(d); ok && h.prev.Features().Has(store.AsyncRelease) {
			h.prev.ReleaseAsync(pool, owner, pd, prevBudget, func(error) {})
		} else {
			h.releasePrev(pool, owner, d)
		}
	}
	h.Store.ReleaseAsync(pool, owner, d, budget, done)
}

func (h *handover) releasePrev(pool store.PoolID, owner store.Owner, d store.Demand) {
	pd, ok := h.forPrev(d)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), prevBudget)
	defer cancel()
	_, _ = h.prev.Release(ctx, pool, owner, pd, false)
}

// Renew renews in the old store the leases also taken there.
func (h *handover) Renew(ctx context.Context, batch []store.Renewal) error {
	var prevBatch []store.Renewal
	h.mu.Lock()
	for _, r := range batch {
		if _, ok := h.inPrev[leaseRef{r.Pool, r.Owner}]; ok {
			prevBatch = append(prevBatch, store.Renewal{Pool: r.Pool, Owner: r.Owner, TTL: r.TTL, Weight: r.Weight, Parent: r.Parent})
		}
	}
	h.mu.Unlock()
	if len(prevBatch) > 0 {
		pctx, cancel := context.WithTimeout(ctx, prevBudget)
		_ = h.prev.Renew(pctx, prevBatch)
		cancel()
	}
	return h.Store.Renew(ctx, batch)
}

// Sync syncs a node's connections in both stores while the handover lasts
// (in the old one when it keeps members).
func (h *handover) Sync(ctx context.Context, node store.NodeID, ttl time.Duration, batch []store.SyncPool) error {
	if h.active.Load() && h.prev.Features().Has(store.Members) {
		cp := make([]store.SyncPool, len(batch))
		for i, sp := range batch {
			cp[i] = store.SyncPool{Pool: sp.Pool, Members: sp.Members}
		}
		pctx, cancel := context.WithTimeout(ctx, prevBudget)
		_ = h.prev.Sync(pctx, node, ttl, cp)
		cancel()
	}
	return h.Store.Sync(ctx, node, ttl, batch)
}

// forget reports whether owner's lease of pool was also taken in the old
// store, and forgets it.
func (h *handover) forget(pool store.PoolID, owner store.Owner) bool {
	ref := leaseRef{pool, owner}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, in := h.inPrev[ref]
	delete(h.inPrev, ref)
	return in
}
