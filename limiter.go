package keycap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap/internal/coarse"
	"github.com/keycap/keycap/store"
)

// Store is what a Limiter takes its slots from: memstore (in this process),
// redisstore (Redis, Sentinel, Cluster), pgstore (PostgreSQL) or nullstore
// (limits off). Package store says what one implements.
type Store = store.Store

// Limiter hands out leases on the pools of one Store. It is safe for
// concurrent use; make one per process and share it.
//
// Which call to use:
//   - Do runs a function while holding a slot of each limit, and releases
//     them when it returns or panics. Most callers should use Do: its steady
//     path allocates nothing, and nothing can leak.
//   - Acquire returns a Lease to release later, for work whose end is not a
//     function's return (a stream handed to another goroutine, a connection).
//     Release it with defer lease.Release(); a nil lease's Release does
//     nothing, so the defer is safe even when Acquire failed.
//
// Both wait for a slot only when every limit has a Wait, and refuse at once
// otherwise. A Limiter keeps its held leases alive with one renewal loop,
// started with the first lease and stopped by Close.
type Limiter struct {
	store    store.Store
	features store.Features // the store's, read once
	observer Observer
	failMode FailMode
	budget   time.Duration
	origin   time.Duration // the Limiter's clock starts here, on the coarse clock
	base     time.Time     // ... as a wall time
	poll     func() time.Duration

	closed    atomic.Bool
	shadowAll bool      // WithShadowMode
	inspect   *ledger   // WithInspection; nil: none
	ov        *override // WithOverrides; nil: none
	free      sync.Pool // released leases kept for reuse (Lease.reuse)

	outages  outages
	owners   owners
	keeper   keeper
	releaser releaser
	waiters  waiters
	nodes    nodes
	lines    lines
	parked   parked
	tuners   tuners
}

// An Option configures a Limiter.
type Option struct{ apply func(*Limiter) }

// WithObserver sends the Limiter's events to o. Combine several with
// Observers.
func WithObserver(o Observer) Option { return Option{func(l *Limiter) { l.observer = o }} }

// WithDefaultFailMode sets the fail mode of limits that have none
// (FailDefault). The default is FailOpen: keycap is a fairness tool, and a
// store outage should not take the service down with it.
func WithDefaultFailMode(m FailMode) Option { return Option{func(l *Limiter) { l.failMode = m }} }

// WithDecisionBudget sets how long any store call may take before the store
// counts as failed for it (default DefaultBudget): a store that is slow, hung
// or failing over costs a caller at most this, then the limit's fail mode
// applies, and the outage is reported. A limit may set its own
// (Spec.Budget). Stores that live in the process (memstore) are not
// bounded: they need no deadline.
//
// The budget counts from the call, so it bounds the caller's wait whatever
// delays it; but a call that the store had for less than half of it while
// the process ran (its request waited to be sent, or the process was
// starved of CPU) is not the store's failure: it is reported as
// ProcessOverloaded, not as an outage (BudgetError). docs/operations.md
// says how to size the budget.
//
// The budget works through the context given to the store: redisstore needs
// a client with ContextTimeoutEnabled (it checks), pgstore always honours it.
func WithDecisionBudget(d time.Duration) Option { return Option{func(l *Limiter) { l.budget = d }} }

// WithRecoverAfter sets how long a partition of the store must answer
// without a failure before its outage is reported over (default
// 1 s). At least 1 ms.
func WithRecoverAfter(d time.Duration) Option {
	return Option{func(l *Limiter) { l.outages.quiet = d }}
}

// NewLimiter returns a Limiter over st. A nil store is an error.
func NewLimiter(st Store, opts ...Option) (*Limiter, error) {
	if st == nil {
		return nil, errors.New("keycap: NewLimiter: the store is nil")
	}
	l := &Limiter{store: st, features: st.Features(), failMode: FailOpen, budget: DefaultBudget,
		base: time.Now(), origin: coarse.Now(), poll: pollInterval}
	l.outages.quiet = defaultRecoverAfter
	for _, o := range opts {
		if o.apply != nil {
			o.apply(l)
		}
	}
	switch {
	case l.failMode != FailOpen && l.failMode != FailClosed:
		return nil, &InvalidLimitError{Field: "default fail mode", Value: l.failMode.String(), Reason: "must be FailOpen or FailClosed"}
	case l.budget <= 0:
		return nil, &InvalidLimitError{Field: "decision budget", Value: l.budget.String(), Reason: "must be positive"}
	case l.outages.quiet < time.Millisecond:
		return nil, &InvalidLimitError{Field: "recover after", Value: l.outages.quiet.String(), Reason: "must be at least 1ms"}
	}
	if l.features&store.InProcess == 0 {
		coarse.Watch() // for overBudget: was the process stalled?
	}
	if err := l.nodes.init(l); err != nil {
		return nil, err
	}
	l.owners.init(l)
	l.keeper.init(l)
	l.releaser.init(l)
	l.waiters.init()
	l.lines.init(l)
	l.parked.init(l)
	l.tuners.l = l
	if l.ov != nil {
		if err := l.ov.init(l); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// has reports whether the store has feature f.
func (l *Limiter) has(f store.Features) bool { return l.features&f == f }

// need returns a *store.NotSupportedError naming what the store lacks of f,
// from the features read once; nil when it has them all.
func (l *Limiter) need(f store.Features) error {
	if lack := f &^ l.features; lack != 0 {
		return &store.NotSupportedError{Feature: lack, Store: fmt.Sprintf("%T", l.store)}
	}
	return nil
}

// Close stops the renewal loop and the node's heartbeat, and waits for the
// releases in flight. Leases still held stay valid until their TTL runs out
// and can still be released; each one's Lost channel is closed when its TTL
// runs out, since nothing renews it any more. Acquire and Do return
// ErrClosed. Close is idempotent.
func (l *Limiter) Close() error {
	if l.closed.CompareAndSwap(false, true) {
		l.nodes.close()
		l.keeper.close()
		l.releaser.close()
		l.parked.close()
		l.lines.close()
		l.tuners.close()
		if l.ov != nil {
			l.ov.close()
		}
	}
	return nil
}

// now reads the Limiter's clock: the process's coarse clock (two atomic
// loads, at most about a millisecond behind), which times renewals and
// deadlines early rather than late.
func (l *Limiter) now() time.Duration { return coarse.Now() - l.origin }

// precise reads the precise clock on now's scale, for the durations events
// report: a duration from a now to a precise is never short, and at most
// about a millisecond long.
func (l *Limiter) precise() time.Duration { return coarse.Precise() - l.origin }

// Acquire takes one slot of every limit, or none: when a limit refuses, the
// slots already taken are released before Acquire returns. The lease it
// returns must be released (Lease.Release), typically with defer; a nil
// lease's Release does nothing.
//
// Errors:
//   - errors.Is(err, ErrLimitExceeded): a limit had no free slot, in time;
//     errors.As gives the *LimitError that names it. A limit of Max 0
//     refuses at once, without a store call.
//   - errors.Is(err, ErrStoreUnavailable): the store failed for a limit that
//     fails closed (*StoreError). A limit that fails open is skipped
//     instead: the lease holds no slot for it (Lease.Guarded).
//   - the context's error, when ctx ends first. It is never reported as a
//     store failure.
//   - errors.Is(err, ErrInvalidLimit): an invalid Spec, a zero Limit, or two
//     limits on the same pool.
//   - errors.Is(err, ErrNotSupported): a weight or a parent on a store
//     without shares.
//   - ErrClosed after Close.
//
// Waiting: Acquire waits for a slot only when every limit has a Wait, for
// the smallest of them. On a store with wait lines (memstore, redisstore,
// pgstore), a refused waiter takes a ticket in the pool's line in the same
// call, and a slot that frees on any client is handed to the oldest ticket:
// waiters are served in arrival order, fresh callers do not overtake them,
// and the store's notification wakes the waiter at once (a poll every second is the
// fallback). With several limits, the slots are taken in the order of their
// pools, each held while the caller waits in the next one's line, so that
// waiters never deadlock. On other stores a waiter is woken by a release
// through this Limiter, and otherwise polls every 100 ms ± 50 %. Acquire
// with no limits returns an empty lease.
func (l *Limiter) Acquire(ctx context.Context, limits ...Limit) (*Lease, error) {
	return l.acquire(ctx, request{limits: limits})
}

// Do runs fn while holding one slot of every limit, and releases them when
// fn returns or panics. It returns Acquire's error without running fn, or
// fn's error. fn's context carries the lease (ContextWithLease) when its
// limits ask for fencing tokens (FencesFrom) or have an adaptive parent
// (ReportOverload); an error of fn that matches context.DeadlineExceeded
// counts as an overload for an adaptive parent. When fn's context does not
// carry the lease, Do reuses it: with one limit
// taken without waiting, its steady path allocates nothing. On a store that
// lives in the process (memstore), such a slot is held with no expiry and
// without a Lease, so it is never renewed; a fn that never returns then
// holds its slot for good, where a renewed slot is held until a TTL after
// Close.
func (l *Limiter) Do(ctx context.Context, fn func(context.Context) error, limits ...Limit) error {
	if l.pinnable(limits) {
		return l.doPinned(ctx, fn, &limits[0])
	}
	ls, err := l.acquire(ctx, request{limits: limits, reuse: true})
	if err != nil {
		return err
	}
	fctx := ContextWithLease(ctx, ls)
	if fctx == ctx {
		defer ls.reuse() // fn never sees ls
	} else {
		// fn's context holds ls, and may outlive fn (a goroutine it
		// started): ls is not reused, so FencesFrom never reads another
		// caller's tokens there.
		defer ls.Release()
	}
	err = fn(fctx)
	if errors.Is(err, context.DeadlineExceeded) {
		ls.Overloaded() // a timeout is an overload signal for an adaptive parent
	}
	return err
}

// pollInterval is 100 ms ± 50 %: the randomness keeps waiters from polling
// in step.
func pollInterval() time.Duration {
	return 50*time.Millisecond + rand.N(100*time.Millisecond)
}

// budgetOf returns lim's decision budget.
func (l *Limiter) budgetOf(lim *Limit) time.Duration {
	if lim.spec.Budget > 0 {
		return lim.spec.Budget
	}
	return l.budget
}

func noop() {}

// bound gives a store call the budget d as a deadline, unless the store
// lives in the process or ctx ends sooner anyway.
func (l *Limiter) bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if l.features&store.InProcess != 0 {
		return ctx, noop
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, noop
	}
	return context.WithTimeout(ctx, d)
}

// failModeOf returns what a store failure does to lim: a shadow limit
// always fails open.
func (l *Limiter) failModeOf(lim *Limit) FailMode {
	switch {
	case lim.spec.Shadow:
		return FailOpen
	case lim.spec.FailMode != FailDefault:
		return lim.spec.FailMode
	}
	return l.failMode
}

// check validates a set of limits for one Acquire and returns its wait.
func check(limits []Limit) (time.Duration, error) {
	wait := time.Duration(-1)
	for i := range limits {
		lim := &limits[i] // not copied per check
		if lim.invalid {
			return 0, lim.spec.Validate()
		}
		if !lim.valid() {
			return 0, fmt.Errorf("%w: limit %d of %d is the zero Limit (make limits with Spec.For)", ErrInvalidLimit, i+1, len(limits))
		}
		for j := range i {
			if limits[j].pool == lim.pool {
				return 0, fmt.Errorf("%w: two limits on pool %q with key %q in one Acquire", ErrInvalidLimit, lim.spec.Name, lim.key)
			}
		}
		if wait < 0 || lim.spec.Wait < wait {
			wait = lim.spec.Wait
		}
	}
	return max(wait, 0), nil
}

// owners stamps the owner tokens of a Limiter's leases.
type owners struct {
	tag      store.Tag // the node's (nodeTag)
	tagBits  uint32    // the same, big-endian
	wallBase int64     // the Limiter's clock origin in Unix milliseconds
	seq      atomic.Uint64
}

func (o *owners) init(l *Limiter) {
	o.tag = nodeTag(l.nodes.name)
	o.tagBits = binary.BigEndian.Uint32(o.tag[:])
	o.wallBase = l.base.UnixMilli()
	o.seq.Store(rand.Uint64())
}

// newOwner returns a fresh owner token stamped with the node and the time:
// bytes 0–3 are the node's tag, 4–9 the Unix time in milliseconds, byte 10
// is 'k' and 11–15 a per-Limiter sequence from a random start, so that
// tokens never repeat within a Limiter and, with the node's tag, nearly
// never across nodes. An inspection's holders then show, on any server, how
// old a lease is and which node holds it.
func (l *Limiter) newOwner(now time.Duration) store.Owner {
	ms := uint64(l.owners.wallBase + int64(now/time.Millisecond))
	seq := l.owners.seq.Add(1)
	// Two 8-byte stores rather than sixteen byte stores: the token is read
	// back whole at once, which bytes just stored one by one would stall.
	var o store.Owner
	binary.BigEndian.PutUint64(o[:8], uint64(l.owners.tagBits)<<32|ms>>16&0xffffffff)
	binary.BigEndian.PutUint64(o[8:], (ms&0xffff)<<48|uint64('k')<<40|seq&0xffffffffff)
	return o
}

// nodeTag returns the tag that the owners of a node's leases start with.
func nodeTag(node string) store.Tag { return store.TagOf(store.Internal, "node:"+node) }

// ownerForTag starts every frontdoor.OwnerFor token: such an owner carries
// no stamp.
var ownerForTag = store.TagOf(store.Internal, "owner")

// stamp returns what a Limiter stamped in the owner of one of its leases:
// its node's tag and when the lease was asked for. ok is false for an owner
// that carries no stamp (a job's or a member's, whose token is a hash), as
// far as the stamp's marker can tell.
func stamp(o store.Owner) (node store.Tag, at time.Time, ok bool) {
	if o[10] != 'k' || store.Tag(o[:4]) == ownerForTag {
		return store.Tag{}, time.Time{}, false
	}
	ms := int64(o[4])<<40 | int64(o[5])<<32 | int64(o[6])<<24 | int64(o[7])<<16 | int64(o[8])<<8 | int64(o[9])
	return store.Tag(o[:4]), time.UnixMilli(ms), true
}
