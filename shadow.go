package keycap

import (
	"context"

	"github.com/keycap/keycap/store"
)

// WithShadowMode makes every limit the Limiter is given a shadow limit
// (Spec.Shadow): the Limiter decides and reports but never refuses, so that
// a whole set of caps can be watched on real traffic before it is enforced.
func WithShadowMode() Option { return Option{func(l *Limiter) { l.shadowAll = true }} }

// hasShadow reports whether any of limits is a shadow limit, or the Limiter
// makes them all shadows.
func (l *Limiter) hasShadow(limits []Limit) bool {
	if l.shadowAll {
		return len(limits) > 0
	}
	for i := range limits {
		if limits[i].spec.Shadow {
			return true
		}
	}
	return false
}

// acquireShadowed is acquire for a request with shadows among its limits:
// the shadows are decided first, on every call, then the enforced limits
// are acquired as usual; the shadow slots are given back at once when the
// enforced limits refuse, and released with the lease otherwise.
func (l *Limiter) acquireShadowed(ctx context.Context, r request) (*Lease, error) {
	var eb, sb [4]Limit // the common case, without an allocation
	enforced, shadows := eb[:0], sb[:0]
	for _, lim := range r.limits {
		if l.shadowAll && !lim.spec.Shadow {
			lim.makeShadow()
		}
		if lim.spec.Shadow {
			lim.spec.Wait = 0
			shadows = append(shadows, lim)
		} else {
			enforced = append(enforced, lim)
		}
	}
	if err := l.checkRequest(request{limits: shadows, member: r.member}); err != nil {
		return nil, err
	}
	sh := l.acquireShadows(ctx, shadows)
	ok := false
	defer func() {
		if !ok && sh != nil { // refused, failed, or an observer panicked
			sh.Release()
		}
	}()
	r.limits = enforced
	ls, err := l.acquire(ctx, r)
	if err != nil {
		return nil, err
	}
	ok = true
	if sh != nil {
		ls.mu.Lock() // admitted: the keeper may look at it
		ls.more().shadow = sh
		ls.mu.Unlock()
	}
	return ls, nil
}

// acquireShadows decides each shadow limit once, through takeSlot (a
// shadow fails open): a slot where it would be granted, a LimitExceeded
// where it would be refused, a StoreFailed (and no slot) where the store
// fails. It returns the lease of the slots taken, admitted, or nil when
// none was.
func (l *Limiter) acquireShadows(ctx context.Context, limits []Limit) *Lease {
	now := l.now()
	ls := newLease(l, limits, now, false)
	if l.inspect != nil {
		if label, ok := ctx.Value(labelKey{}).(string); ok {
			ls.more().label = label
		}
	}
	took := false
	for i := range ls.slots {
		s := &ls.slots[i]
		if s.limit.spec.Max == 0 {
			l.refused(ctx, &s.limit, 0)
			continue
		}
		o, _, _, err := l.takeSlot(ctx, &s.limit, ls.owner, store.Ticket{}, false, false)
		switch {
		case err != nil: // the context ended: the store may have granted it
			l.releaseLater(s.limit, ls.owner, false)
		case o == refused:
			l.refused(ctx, &s.limit, 0)
		case o == held:
			s.held, took = true, true
			s.renewAt, s.deadline, s.since = now+s.limit.spec.TTL/3, now+s.limit.spec.TTL, l.now()
		}
	}
	if !took {
		return nil
	}
	l.admit(ctx, ls, 0)
	return ls
}
