package keycap

import (
	"context"
	"fmt"
	"time"

	"github.com/keycap/keycap/internal/link"
	"github.com/keycap/keycap/store"
)

// door is what package frontdoor reaches of a Limiter, through
// internal/link: the calls front doors make beyond Acquire and Do. Its
// methods are exported so that frontdoor's interface can name them; the
// type is not, so nothing else can.
type door struct{ l *Limiter }

func init() { link.Door = func(l any) any { return door{l.(*Limiter)} } }

func (d door) Emit(e Event) { d.l.emit(e) }

func (d door) Call(ctx context.Context, lim Limit, op func(context.Context) error) error {
	return d.l.call(ctx, &lim, op)
}

func (d door) Store() store.Store { return d.l.store }

func (d door) Node() string { return d.l.nodes.name }

func (d door) HeartbeatInterval() time.Duration { return d.l.nodes.interval }

func (d door) Labels() bool { return d.l.inspect != nil }

func (d door) AcquireMember(ctx context.Context, member string, limits []Limit) (*Lease, error) {
	return d.l.acquireAs(ctx, member, limits)
}

func (d door) Heartbeat(ctx context.Context) error { return d.l.nodes.sync(ctx, false) }

func (d door) Withdraw(ctx context.Context) error { return d.l.nodes.sync(ctx, true) }

func (d door) AcquireOrPark(ctx context.Context, owner store.Owner, parkFor, claim time.Duration, wake func(), limits []Limit) (*Lease, error) {
	if owner == store.KeptFor {
		return nil, fmt.Errorf("%w: parking needs an owner (frontdoor.OwnerFor)", ErrInvalidLimit)
	}
	if parkFor <= 0 || claim <= 0 || wake == nil {
		return nil, fmt.Errorf("%w: parking needs a positive For and Claim, and a Wake (got %s, %s)", ErrInvalidLimit, parkFor, claim)
	}
	return d.l.acquire(ctx, request{limits: limits, park: &parking{Owner: owner, For: parkFor, Claim: claim, Wake: wake}})
}

func (d door) Unpark(owner store.Owner, limits []Limit) {
	l := d.l
	l.parked.cancel(owner)
	if !l.has(store.Lines) {
		return
	}
	for _, lim := range limits {
		if lim.valid() {
			l.releaseLater(lim, owner, true)
		}
	}
}

func (d door) Since(ctx context.Context, name, id string, ttl time.Duration) (time.Duration, error) {
	l := d.l
	if err := l.need(store.Marks); err != nil {
		return 0, err
	}
	lim := Limit{spec: Spec{Name: "mark:" + name, Max: 1, TTL: DefaultTTL, Family: familyInternal}, key: id,
		pool: store.PoolOf(store.Internal, "mark:"+name, id)}
	var age time.Duration
	err := l.call(ctx, &lim, func(ctx context.Context) error {
		var err error
		age, _, err = l.store.Mark(ctx, lim.pool, ttl)
		return err
	})
	return age, err
}
