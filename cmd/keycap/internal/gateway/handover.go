package gateway

import (
	"context"
	"errors"
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
	return context.WithTimeout(ctx, prevBudget)
}

// prevBudget bounds every call to the old store.
const prevBudget = 250 * time.Millisecond

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

// store returns h as the Limiter's store: one that also releases without its
// caller waiting when the new store does (asyncHandover), so that a request
// after a reload does not wait for its releases (one round trip in each
// store while the handover lasts, one in the new store for good after).
func (h *handover) store() keycap.Store {
	if a, ok := h.Store.(keycap.AsyncReleaser); ok {
		return asyncHandover{h, a}
	}
	return h
}

// asyncHandover is a handover whose new store is a keycap.AsyncReleaser.
type asyncHandover struct {
	*handover
	next keycap.AsyncReleaser
}

var _ keycap.AsyncReleaser = asyncHandover{}

// ReleaseAsync releases owner's slot in both stores without waiting for the
// new one; its promise (a later call is applied after the release) holds in
// each: the old store's release goes first, sent the same way when that
// store releases without waiting too, and waited for (within prevCtx's
// bound) when it does not. Its outcome is ignored, as every call to the old
// store's is.
func (h asyncHandover) ReleaseAsync(pool keycap.PoolID, owner keycap.Owner, budget time.Duration, done func(error)) {
	if h.forget(pool, owner) {
		if prev, ok := h.prev.(keycap.AsyncReleaser); ok {
			prev.ReleaseAsync(pool, owner, prevBudget, func(error) {})
		} else {
			h.releasePrev(pool, owner)
		}
	}
	h.next.ReleaseAsync(pool, owner, budget, done)
}

func (h *handover) releasePrev(pool keycap.PoolID, owner keycap.Owner) {
	ctx, cancel := prevCtx(context.Background())
	defer cancel()
	_ = h.prev.Release(ctx, pool, owner)
}

func (h *handover) Release(ctx context.Context, pool keycap.PoolID, owner keycap.Owner) error {
	if h.forget(pool, owner) {
		h.releasePrev(pool, owner)
	}
	return h.Store.Release(ctx, pool, owner)
}

func (h *handover) Renew(ctx context.Context, batch []keycap.Renewal) error {
	var prevBatch []keycap.Renewal
	h.mu.Lock()
	for _, r := range batch {
		if _, ok := h.inPrev[leaseRef{r.Pool, r.Owner}]; ok {
			prevBatch = append(prevBatch, keycap.Renewal{Pool: r.Pool, Owner: r.Owner, TTL: r.TTL, Weight: r.Weight, Parent: r.Parent})
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

// The new store's lines, notifications and shares serve the Limiter built on
// the handover, so that waiters are still woken and weighted and parented
// limits still work after the switch. Their slots are taken in the old store
// too, as Acquire's are, while the handover lasts (without a ticket there:
// the new store's line decides who is next).

var (
	_ keycap.Liner       = (*handover)(nil)
	_ keycap.Notifier    = (*handover)(nil)
	_ keycap.Sharer      = (*handover)(nil)
	_ keycap.Partitioner = (*handover)(nil)
)

// Partition implements keycap.Partitioner with the new store's partitions
// (a cluster's slot ranges), so that an outage of one master after a reload
// is still one outage, reported once, and not ended by another master's
// answers. A store of one partition answers "".
func (h *handover) Partition(pool keycap.PoolID) string {
	if p, ok := h.Store.(keycap.Partitioner); ok {
		return p.Partition(pool)
	}
	return ""
}

// errNoLines is the error of a line call on a store that keeps no lines: the
// gateway's stores all do.
var errNoLines = errors.New("gateway: the store keeps no lines or shares")

// takePrev takes owner's slot in the old store with take, while the handover
// lasts. It reports whether the old store refused (the cap holds across the
// switch) and whether it took the slot.
func (h *handover) takePrev(ctx context.Context, take func(context.Context) (bool, error)) (refused, took bool, err error) {
	if !h.active.Load() {
		return false, false, nil
	}
	pctx, cancel := prevCtx(ctx)
	ok, perr := take(pctx)
	cancel()
	switch {
	case perr != nil && ctx.Err() != nil:
		return false, false, ctx.Err()
	case perr == nil && !ok:
		return true, false, nil
	}
	return false, perr == nil, nil
}

func (h *handover) Queue(ctx context.Context, pool keycap.PoolID, owner keycap.Owner, max int, ttl time.Duration, t keycap.Ticket) (bool, int, error) {
	next, ok := h.Store.(keycap.Liner)
	if !ok {
		return false, 0, errNoLines
	}
	refused, took, err := h.takePrev(ctx, func(ctx context.Context) (bool, error) { return h.prev.Acquire(ctx, pool, owner, max, ttl) })
	if err != nil || refused {
		return false, 0, err
	}
	granted, ahead, err := next.Queue(ctx, pool, owner, max, ttl, t)
	h.settle(took, granted && err == nil, pool, owner, func() { h.releasePrev(pool, owner) })
	return granted, ahead, err
}

func (h *handover) Dequeue(ctx context.Context, pool keycap.PoolID, owner keycap.Owner) error {
	next, ok := h.Store.(keycap.Liner)
	if !ok {
		return errNoLines
	}
	if h.forget(pool, owner) {
		h.releasePrev(pool, owner)
	}
	return next.Dequeue(ctx, pool, owner)
}

func (h *handover) Notify(ctx context.Context, pool keycap.PoolID, fn func([]keycap.Owner)) (func(), error) {
	next, ok := h.Store.(keycap.Notifier)
	if !ok {
		return nil, errNoLines
	}
	return next.Notify(ctx, pool, fn)
}

func (h *handover) AcquireDemand(ctx context.Context, d keycap.Demand, t *keycap.Ticket) (bool, int, error) {
	next, ok := h.Store.(keycap.Sharer)
	if !ok {
		return false, 0, errNoLines
	}
	prev, _ := h.prev.(keycap.Sharer)
	var refused, took bool
	var err error
	if prev != nil {
		refused, took, err = h.takePrev(ctx, func(ctx context.Context) (bool, error) {
			ok, _, err := prev.AcquireDemand(ctx, d, nil)
			return ok, err
		})
	}
	if err != nil || refused {
		return false, 0, err
	}
	granted, ahead, err := next.AcquireDemand(ctx, d, t)
	h.settle(took, granted && err == nil, d.Pool, d.Owner, func() { h.releasePrevDemand(prev, d) })
	return granted, ahead, err
}

func (h *handover) ReleaseDemand(ctx context.Context, d keycap.Demand, dequeue bool) (bool, error) {
	next, ok := h.Store.(keycap.Sharer)
	if !ok {
		return false, errNoLines
	}
	if h.forget(d.Pool, d.Owner) {
		prev, _ := h.prev.(keycap.Sharer)
		h.releasePrevDemand(prev, d)
	}
	return next.ReleaseDemand(ctx, d, dequeue)
}

// settle records a slot taken in the old store when the new one granted it
// too, and gives it back otherwise.
func (h *handover) settle(took, granted bool, pool keycap.PoolID, owner keycap.Owner, giveBack func()) {
	switch {
	case took && granted:
		h.mu.Lock()
		h.inPrev[leaseRef{pool, owner}] = struct{}{}
		h.mu.Unlock()
	case took:
		giveBack()
	}
}

// forget reports whether owner's slot of pool was also taken in the old
// store, and forgets it.
func (h *handover) forget(pool keycap.PoolID, owner keycap.Owner) bool {
	ref := leaseRef{pool, owner}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, in := h.inPrev[ref]
	delete(h.inPrev, ref)
	return in
}

func (h *handover) releasePrevDemand(prev keycap.Sharer, d keycap.Demand) {
	if prev == nil {
		return
	}
	ctx, cancel := prevCtx(context.Background())
	defer cancel()
	d.Keep = 0 // the old store keeps nothing for anyone
	_, _ = prev.ReleaseDemand(ctx, d, false)
}

// Inspection and overrides are the new store's: the old one's leases drain,
// and overrides live in the store the gateway now uses.

var (
	_ keycap.Inspector = (*handover)(nil)
	_ keycap.Overrider = (*handover)(nil)
)

// errNoInspection is the error of an inspection or override call on a store
// that keeps neither (none).
var errNoInspection = errors.New("gateway: the store cannot be inspected and keeps no overrides")

func (h *handover) InspectPools(ctx context.Context, q keycap.PageQuery) (keycap.PoolPage, error) {
	next, ok := h.Store.(keycap.Inspector)
	if !ok {
		return keycap.PoolPage{}, errNoInspection
	}
	return next.InspectPools(ctx, q)
}

func (h *handover) InspectPauses(ctx context.Context, q keycap.PageQuery) (keycap.PausePage, error) {
	next, ok := h.Store.(keycap.Inspector)
	if !ok {
		return keycap.PausePage{}, errNoInspection
	}
	return next.InspectPauses(ctx, q)
}

func (h *handover) SetOverride(ctx context.Context, o keycap.Override) error {
	next, ok := h.Store.(keycap.Overrider)
	if !ok {
		return errNoInspection
	}
	return next.SetOverride(ctx, o)
}

func (h *handover) DeleteOverride(ctx context.Context, pool keycap.PoolID) error {
	next, ok := h.Store.(keycap.Overrider)
	if !ok {
		return errNoInspection
	}
	return next.DeleteOverride(ctx, pool)
}

func (h *handover) Overrides(ctx context.Context, since uint64) (uint64, []keycap.Override, error) {
	next, ok := h.Store.(keycap.Overrider)
	if !ok {
		return 0, nil, errNoInspection
	}
	return next.Overrides(ctx, since)
}
