package keycap

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap/store"
)

// Override changes one key's limit at run time, on every server that shares
// the store, without a deploy: its max, its share of a parent, or both.
// Removing it (Limiter.ResetOverride) restores the value in the code or the
// configuration.
type Override struct {
	Family Family
	Name   string // the limit's name
	Key    string // the key, as given to Spec.For
	// Max replaces the limit's max; KeepMax (-1) keeps it. 0 refuses the
	// key. A limit with a parent is never given more than the parent's max.
	Max int
	// Share replaces the key's share of its parent (Spec.Share); 0 keeps it.
	// Ignored for a limit without a parent.
	Share int
	// TTL ends the override by itself after this long; 0 keeps it until it
	// is reset. Read back, it is the time left.
	TTL time.Duration

	// Pool is the pool of (Family, Name, Key), set by the Limiter.
	Pool store.PoolID
}

// KeepMax is the Max of an Override that changes only the share.
const KeepMax = -1

// DefaultOverrideRefresh is how often a Limiter built WithOverrides reads
// the store's overrides, unless told otherwise.
const DefaultOverrideRefresh = time.Second

// WithOverrides makes the Limiter apply the store's overrides (Override) to
// every limit it is given, on every front door: httplimit rules, joblimit
// jobs, connection caps. It reads them in the background every refresh (0:
// DefaultOverrideRefresh), so the hot path pays no round trip, only a map
// lookup while any override is set; an override set on any server takes
// effect here within refresh plus the decision budget (and at once when set
// through this Limiter). The store must keep overrides (memstore,
// redisstore, pgstore): NewLimiter fails on another.
func WithOverrides(refresh time.Duration) Option {
	return Option{func(l *Limiter) {
		if refresh == 0 {
			refresh = DefaultOverrideRefresh
		}
		l.ov = &override{refresh: refresh}
	}}
}

// override is a Limiter's copy of the store's overrides.
type override struct {
	l       *Limiter
	refresh time.Duration
	set     atomic.Pointer[overrideSet] // nil or empty: no override

	mu      sync.Mutex // serialises loads
	version uint64
	loaded  bool
	stop    chan struct{}
	done    chan struct{}
}

type overrideSet struct {
	m map[store.PoolID]overrideEntry
}

type overrideEntry struct {
	o     Override
	until time.Duration // on the Limiter's clock; 0: none
}

func (v *override) init(l *Limiter) error {
	if v.refresh < time.Millisecond {
		return &InvalidLimitError{Field: "override refresh", Value: v.refresh.String(), Reason: "must be at least 1ms"}
	}
	if err := l.need(store.Overrides); err != nil {
		return fmt.Errorf("keycap: WithOverrides: %w", err)
	}
	v.l = l
	v.stop, v.done = make(chan struct{}), make(chan struct{})
	go v.loop()
	return nil
}

// loop reloads the overrides every refresh until the Limiter closes. A
// store failure keeps the last set (and is reported as the Limiter's
// other calls are).
func (v *override) loop() {
	defer close(v.done)
	t := time.NewTicker(v.refresh)
	defer t.Stop()
	for {
		_ = v.load(context.Background())
		select {
		case <-v.stop:
			return
		case <-t.C:
		}
	}
}

func (v *override) close() {
	close(v.stop)
	<-v.done
}

// overridesLimit names the overrides to the outage accounting of a store of
// one partition.
var overridesLimit = Limit{spec: Spec{Name: "overrides", Max: 1, TTL: DefaultTTL, Family: familyInternal},
	pool: store.PoolOf(store.Internal, "overrides", "")}

// callOverrides runs op, a call to the store's overrides, within the
// Limiter's decision budget. On a store of one partition it counts in the
// store's outages as any call does. On a partitioned store (Redis Cluster)
// it does not: the overrides live where no pool's partition says, so a
// failure there says nothing of the pools' partitions, and a success must
// not end their outage. The background reload retries at the next
// refresh; a caller of SetOverride gets the error.
func (l *Limiter) callOverrides(ctx context.Context, op func(ctx context.Context) error) error {
	if !l.has(store.Partitions) {
		return l.call(ctx, &overridesLimit, op)
	}
	return l.run(ctx, l.budget, op)
}

// load reads the store's overrides if they changed since the last load.
func (v *override) load(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var version uint64
	var list []store.Override
	err := v.l.callOverrides(ctx, func(ctx context.Context) error {
		var err error
		version, list, err = v.l.store.Overrides(ctx, v.version)
		return err
	})
	if err != nil {
		return err
	}
	if v.loaded && version == v.version {
		return nil
	}
	now := v.l.now()
	set := &overrideSet{m: make(map[store.PoolID]overrideEntry, len(list))}
	for _, so := range list {
		o := fromStore(so)
		e := overrideEntry{o: o}
		if o.TTL > 0 {
			e.until = now + o.TTL
		}
		set.m[o.Pool] = e
	}
	v.version, v.loaded = version, true
	v.set.Store(set)
	return nil
}

// applyOne returns lim with the override of its pool applied, if one is in
// force.
func (v *override) applyOne(lim *Limit) Limit {
	set := v.set.Load()
	if set == nil || len(set.m) == 0 {
		return *lim
	}
	e, ok := set.m[lim.pool]
	if !ok || (e.until != 0 && v.l.now() >= e.until) {
		return *lim
	}
	return e.o.applyTo(*lim)
}

// apply returns limits with the overrides in force applied: limits itself
// when none applies, else a copy.
func (v *override) apply(limits []Limit) []Limit {
	set := v.set.Load()
	if set == nil || len(set.m) == 0 {
		return limits
	}
	copied := false
	for i := range limits {
		e, ok := set.m[limits[i].pool]
		if !ok || (e.until != 0 && v.l.now() >= e.until) { // the clock read only for a match
			continue
		}
		if !copied {
			limits, copied = append([]Limit(nil), limits...), true
		}
		limits[i] = e.o.applyTo(limits[i])
	}
	return limits
}

// applyTo returns lim changed by o.
//
// A max below the limit's weight leaves no room for one of its leases: the
// limit then refuses at once, as a max of 0 does, rather than wait for room
// that can never be. A minimum above the new max is lowered to it.
func (o Override) applyTo(lim Limit) Limit {
	sp := &lim.spec
	if o.Max >= 0 {
		sp.Max = o.Max
		if sp.Parent != nil {
			sp.Max = min(sp.Max, sp.Parent.max)
		}
		if sp.Weight > sp.Max {
			sp.Max = 0
		}
	}
	if sp.Parent != nil {
		if o.Share > 0 {
			sp.Share = o.Share
		}
		sp.Minimum = min(sp.Minimum, sp.Max)
	}
	lim.share()
	return lim
}

// Overridden returns the limit as the Limiter applies it now: lim with the
// override of its pool, if one is in force here. It makes no store call.
func (l *Limiter) Overridden(lim Limit) Limit {
	if l.ov == nil {
		return lim
	}
	return l.ov.applyOne(&lim)
}

// check validates an override for the store.
func (o *Override) check() error {
	switch {
	case o.Name == "":
		return &InvalidLimitError{Field: "name", Value: `""`, Reason: "must not be empty"}
	case !o.Family.valid():
		return &InvalidLimitError{Field: "family", Value: o.Family.String(), Reason: "must be FamilyApp, FamilyJob, FamilyConn or FamilyPause"}
	case o.Max < KeepMax:
		return &InvalidLimitError{Field: "max", Value: fmt.Sprint(o.Max), Reason: "must be at least 0, or KeepMax"}
	case o.Share < 0:
		return &InvalidLimitError{Field: "share", Value: fmt.Sprint(o.Share), Reason: "must be at least 1, or 0 to keep it"}
	case o.Max == KeepMax && o.Share == 0:
		return &InvalidLimitError{Field: "max", Value: "KeepMax", Reason: "an override must change the max or the share"}
	case o.TTL < 0:
		return &InvalidLimitError{Field: "ttl", Value: o.TTL.String(), Reason: "must be at least 0"}
	}
	o.Pool = store.PoolOf(byte(o.Family), o.Name, o.Key)
	return nil
}

// toStore returns o as a store keeps it.
func (o Override) toStore() store.Override {
	return store.Override{Pool: o.Pool, Family: uint8(o.Family), Name: o.Name, Key: o.Key, Max: o.Max, Share: o.Share, TTL: o.TTL}
}

// fromStore returns the override a store kept.
func fromStore(o store.Override) Override {
	return Override{Pool: o.Pool, Family: Family(o.Family), Name: o.Name, Key: o.Key, Max: o.Max, Share: o.Share, TTL: o.TTL}
}

// SetOverride stores o in the store, for every Limiter of the store built
// WithOverrides, and applies it here at once when this one is. The store
// must keep overrides (else the error matches ErrNotSupported).
func (l *Limiter) SetOverride(ctx context.Context, o Override) error {
	if err := l.need(store.Overrides); err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	if err := l.callOverrides(ctx, func(ctx context.Context) error { return l.store.SetOverride(ctx, o.toStore()) }); err != nil {
		return err
	}
	return l.reloadOverrides(ctx)
}

// ResetOverride removes the override of (f, name, key): the limit's own
// values apply again, here at once, elsewhere within the refresh.
func (l *Limiter) ResetOverride(ctx context.Context, f Family, name, key string) error {
	if err := l.need(store.Overrides); err != nil {
		return err
	}
	pool := store.PoolOf(byte(f), name, key)
	if err := l.callOverrides(ctx, func(ctx context.Context) error { return l.store.DeleteOverride(ctx, pool) }); err != nil {
		return err
	}
	return l.reloadOverrides(ctx)
}

// Overrides returns the overrides in force in the store, with their time
// left.
func (l *Limiter) Overrides(ctx context.Context) ([]Override, error) {
	if err := l.need(store.Overrides); err != nil {
		return nil, err
	}
	var list []store.Override
	err := l.callOverrides(ctx, func(ctx context.Context) error {
		var err error
		_, list, err = l.store.Overrides(ctx, 0)
		return err
	})
	out := make([]Override, len(list))
	for i, o := range list {
		out[i] = fromStore(o)
	}
	return out, err
}

func (l *Limiter) reloadOverrides(ctx context.Context) error {
	if l.ov == nil {
		return nil
	}
	return l.ov.load(ctx)
}
