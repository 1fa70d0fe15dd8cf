package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap"
)

// handover is the store of a configuration that replaced another one's store
// (a reload that changed the store section) while requests and WebSockets
// that started on the old configuration still hold slots in the old store.
// Until the last of them ends, every slot is taken in both stores: in the old
// one, so that the holders it still counts keep the cap exact across the
// switch, and in the new one, which counts alone afterwards. The old store's
// failures are ignored: the new store decides (the old one is often replaced
// because it is failing).
type handover struct {
	keycap.Store // the new store
	prev         keycap.Store
	active       atomic.Bool

	mu     sync.Mutex
	inPrev map[leaseRef]struct{} // leases also taken in prev
}

type leaseRef struct {
	pool  keycap.PoolID
	owner keycap.Owner
}

func newHandover(next, prev keycap.Store) *handover {
	h := &handover{Store: next, prev: prev, inPrev: map[leaseRef]struct{}{}}
	h.active.Store(true)
	return h
}

// end stops taking slots in the old store, once nothing that started on the
// old configuration holds one there.
func (h *handover) end() { h.active.Store(false) }

// prevCtx bounds a call to the old store: it must not slow the new one down
// for long.
func prevCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 250*time.Millisecond)
}

func (h *handover) Acquire(ctx context.Context, pool keycap.PoolID, owner keycap.Owner, max int, ttl time.Duration) (bool, error) {
	tookPrev := false
	if h.active.Load() {
		pctx, cancel := prevCtx(ctx)
		ok, err := h.prev.Acquire(pctx, pool, owner, max, ttl)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return false, ctx.Err()
		case err == nil && !ok:
			return false, nil // the old store is full: the cap holds across the switch
		case err == nil:
			tookPrev = true
		}
	}
	ok, err := h.Store.Acquire(ctx, pool, owner, max, ttl)
	if tookPrev {
		if err != nil || !ok {
			h.releasePrev(pool, owner)
		} else {
			h.mu.Lock()
			h.inPrev[leaseRef{pool, owner}] = struct{}{}
			h.mu.Unlock()
		}
	}
	return ok, err
}

func (h *handover) releasePrev(pool keycap.PoolID, owner keycap.Owner) {
	ctx, cancel := prevCtx(context.Background())
	defer cancel()
	_ = h.prev.Release(ctx, pool, owner)
}

func (h *handover) Release(ctx context.Context, pool keycap.PoolID, owner keycap.Owner) error {
	ref := leaseRef{pool, owner}
	h.mu.Lock()
	_, inPrev := h.inPrev[ref]
	delete(h.inPrev, ref)
	h.mu.Unlock()
	if inPrev {
		h.releasePrev(pool, owner)
	}
	return h.Store.Release(ctx, pool, owner)
}

func (h *handover) Renew(ctx context.Context, batch []keycap.Renewal) error {
	var prevBatch []keycap.Renewal
	h.mu.Lock()
	for _, r := range batch {
		if _, ok := h.inPrev[leaseRef{r.Pool, r.Owner}]; ok {
			prevBatch = append(prevBatch, keycap.Renewal{Pool: r.Pool, Owner: r.Owner, TTL: r.TTL})
		}
	}
	h.mu.Unlock()
	if len(prevBatch) > 0 {
		pctx, cancel := prevCtx(ctx)
		_ = h.prev.Renew(pctx, prevBatch)
		cancel()
	}
	return h.Store.Renew(ctx, batch)
}

// Sync implements keycap.Syncer for the connection caps: a node's
// connections are synced in both stores while the handover lasts.
func (h *handover) Sync(ctx context.Context, node keycap.NodeID, ttl time.Duration, batch []keycap.SyncPool) error {
	if ps, ok := h.prev.(keycap.Syncer); ok && h.active.Load() {
		cp := make([]keycap.SyncPool, len(batch))
		for i, sp := range batch {
			cp[i] = keycap.SyncPool{Pool: sp.Pool, Members: sp.Members}
		}
		pctx, cancel := prevCtx(ctx)
		_ = ps.Sync(pctx, node, ttl, cp)
		cancel()
	}
	return h.Store.(keycap.Syncer).Sync(ctx, node, ttl, batch)
}
