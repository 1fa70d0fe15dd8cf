package keycap

import (
	"context"
	"time"
)

// Store holds the leases of every pool. Implementations must make each method
// atomic per pool: a pool never holds more than max unexpired leases, however
// many clients call at once. Expiry follows the store's own clock.
//
// A store returns an error only when it could not answer (a network failure,
// a timeout); a full pool or a lost lease is a result, not an error. When the
// caller's context ends, a store returns the context's error. Every method
// must return within a bounded time even when the caller's context has no
// deadline.
//
// Implemented by memstore, nullstore, pgstore and redisstore; storetest
// checks an implementation against the contract.
type Store interface {
	// Acquire adds a lease for owner to pool, expiring after ttl, if the pool
	// holds fewer than max unexpired leases, and reports whether it did. If
	// owner already holds an unexpired lease in pool, Acquire extends it and
	// reports true. max is at least 1.
	Acquire(ctx context.Context, pool PoolID, owner Owner, max int, ttl time.Duration) (bool, error)

	// Release removes owner's lease from pool. Releasing a lease that expired
	// or was never granted does nothing.
	Release(ctx context.Context, pool PoolID, owner Owner) error

	// Renew extends each unexpired lease in batch to expire TTL from now, and
	// sets Lost on each lease that has expired or is unknown. It makes as few
	// round trips as the store allows, one where it can. An error that only
	// concerns some leases is set on their Err; the returned error means that
	// no lease's outcome is known.
	Renew(ctx context.Context, batch []Renewal) error
}

// AsyncReleaser is a Store that can free a lease without its caller
// waiting for the reply: the Limiter then takes a release off its caller's
// path (an HTTP handler's, a job's), so a request costs one blocking round
// trip, the acquire. Implemented by redisstore.
type AsyncReleaser interface {
	// ReleaseAsync starts Release(pool, owner) and returns at once. done is
	// called once with its outcome, on a goroutine of the store's (or before
	// ReleaseAsync returns, by a store that had to wait), and must not
	// block. An acquire, release, queue or dequeue of the same pool
	// that the store receives after ReleaseAsync returns is applied after
	// the release: an Acquire of the pool by the same process finds the
	// slot free. A read (InspectPools) is not ordered with it, and may show
	// the slot held until done is called. A release not sent within budget
	// (0: no bound but the store's own timeouts) is not sent; done then has
	// an error.
	ReleaseAsync(pool PoolID, owner Owner, budget time.Duration, done func(error))
}

// NonBlocking is a Store whose calls never wait on anything outside the
// process. The decision budget does not apply to it: the Limiter gives its
// calls no deadline, and saves the cost of one. Implemented by memstore and
// nullstore.
type NonBlocking interface {
	NonBlocking()
}

// Pinner is a Store that lives and dies with its process, and so can hold a
// slot with no expiry for a caller that is sure to release it: the holder
// cannot die without the store. Limiter.Do takes such slots (its release is
// deferred, so it runs on return and on panic) for one plain limit taken
// without waiting, and then neither renews them nor makes a Lease. A Pinner
// must be NonBlocking too (Do does not pin on a store that blocks), and its
// AcquirePinned and Release must not fail: a failure is handled as
// Acquire's would be, but a release that keeps failing leaves a pinned slot
// held for good. A wrapper that embeds a Pinner and changes Acquire must
// change AcquirePinned too, or Do goes around it. Implemented by memstore.
type Pinner interface {
	// AcquirePinned is Acquire for a slot that is held until Release, never
	// expired. ttl is the limit's TTL: an Inspector reports it as the
	// holder's Expires, as if the slot were renewed without end.
	AcquirePinned(ctx context.Context, pool PoolID, owner Owner, max int, ttl time.Duration) (bool, error)
}

// Renewal is one lease to renew in a Store.Renew batch.
type Renewal struct {
	Pool  PoolID
	Owner Owner
	TTL   time.Duration
	// A lease of a Sharer's demand: its weight (0 or 1 for a plain lease)
	// and its parent (zero when none).
	Weight int
	Parent PoolID

	// Set by the store.
	Lost bool  // the lease had expired or was unknown: it is gone
	Err  error // the store could not renew this lease; its fate is unknown
}

// Marker is a Store that also keeps marks: named start times that every
// client of the store shares, read by the store's clock. joblimit uses them
// to bound how long a job may keep waiting, whichever server runs each of its
// attempts. Implemented by memstore, nullstore, pgstore and redisstore.
type Marker interface {
	// Mark starts the mark id unless it is running, and returns its age: how
	// long ago it started, by the store's clock. started is true for the one
	// call that started it (whose age is 0). A mark is forgotten ttl after it
	// started. One round trip.
	Mark(ctx context.Context, id PoolID, ttl time.Duration) (age time.Duration, started bool, err error)
}

// Pauser is a Store that also keeps pauses: per-name "not before" times that
// every client of the store shares, by the store's clock. The pause package
// keeps one per API. Implemented by memstore, nullstore, pgstore and
// redisstore.
type Pauser interface {
	// Pause makes id paused for at least d from now: a longer pause already
	// running is kept, a shorter one is extended, atomically. It returns how
	// long id is now paused. A pause ends by itself. One round trip.
	Pause(ctx context.Context, id PoolID, d time.Duration) (time.Duration, error)

	// Paused returns how long id remains paused: 0 when it is not. One round
	// trip.
	Paused(ctx context.Context, id PoolID) (time.Duration, error)
}

// Rate is a pace: at most Events per Period on average, with bursts of up to
// Burst events (at least 1).
type Rate struct {
	Events int
	Period time.Duration
	Burst  int
}

// Valid reports whether every field of r is usable.
func (r Rate) Valid() bool { return r.Events > 0 && r.Period > 0 && r.Burst > 0 }

// Pacer is a Store that also paces events with the generic cell rate
// algorithm (GCRA), shared by every client of the store. Implemented by
// memstore, nullstore, pgstore and redisstore.
type Pacer interface {
	// Pace takes one event from id's allowance under rate: it returns 0 when
	// the event may happen now (and counts it), or how long until it may (and
	// counts nothing). One round trip.
	Pace(ctx context.Context, id PoolID, rate Rate) (time.Duration, error)
}

// NodeID identifies one process (a node) among those sharing a store. A
// lease owner whose first eight bytes are a node's ID belongs to that node.
type NodeID [8]byte

// NewNodeID returns the ID of the node named name.
func NewNodeID(name string) NodeID {
	p := PoolIDOf(familyInternal, "node", name)
	var n NodeID
	copy(n[:], p[4:12]) // after the tag, which every node's hash shares
	return n
}

// NodeOwner returns the owner token of a node's member named name: the node's
// ID followed by eight bytes of name's hash. The same node and name always
// give the same token, so acquiring with it is idempotent.
func NodeOwner(node NodeID, name string) Owner {
	p := PoolIDOf(familyInternal, "member", name)
	var o Owner
	copy(o[:8], node[:])
	copy(o[8:], p[4:12]) // after the tag, which every member's hash shares
	return o
}

// Syncer is a Store that can make a node's members of a pool exactly the ones
// the node holds: conncap's heartbeat, which renews a node's live connections
// and drops its ghosts (members whose release never reached the store) in
// one pass. Implemented by memstore, nullstore, pgstore and redisstore.
type Syncer interface {
	// Sync makes, in each pool of batch, node's members (leases whose owner
	// starts with node) exactly Members: each is renewed to expire ttl from
	// now, or added back if the store lost it (even beyond max: the node
	// holds it), and node's other members are removed. Other nodes' members
	// are untouched. It makes as few round trips as the store allows: one per
	// store node. An error that concerns some pools only is set on their Err;
	// the returned error means that no pool's outcome is known.
	Sync(ctx context.Context, node NodeID, ttl time.Duration, batch []SyncPool) error
}

// SyncPool is one pool of a Syncer.Sync batch.
type SyncPool struct {
	Pool    PoolID
	Members []Owner // the node's live members; none empties the node's part

	// Set by the store.
	Removed int   // ghosts removed: node's members that were not in Members
	Err     error // the store could not sync this pool
}

// Ticket is a place in a pool's wait line (Liner.Queue).
type Ticket struct {
	// TTL: the ticket expires unless its owner queues again within TTL, so a
	// waiter that is gone (a cancelled request, a dead server, a deleted job)
	// never blocks the line.
	TTL time.Duration
	// Claim: when a slot is handed to the ticket, it is reserved for its
	// owner for Claim; unclaimed by then, it passes to the next ticket.
	Claim time.Duration
}

// Liner is a Store that keeps a wait line per pool, so that a freed slot
// goes to the caller that has waited longest, on whatever client, instead of
// to whoever asks first. Implemented by memstore, pgstore and redisstore;
// storetest checks it.
//
// In a Liner, a slot that frees (a release, an expiry found by any call, a
// dequeue) is handed to the ticket at the head of the line: it becomes a
// lease of the ticket's owner that expires after the ticket's Claim, and it
// counts against max. Its owner claims it by queueing (or acquiring) again,
// which extends it to the lease's TTL. Acquire honours the line: a caller
// without a ticket is refused while any ticket waits.
type Liner interface {
	// Queue is Acquire for a caller willing to wait: when it refuses, owner
	// holds a ticket in pool's line, taken in the same call (one round trip).
	// A ticket owner already has keeps its place, and its TTL and Claim are
	// refreshed. It returns whether owner now holds a lease and, when not,
	// how many tickets wait before owner's (0: next).
	Queue(ctx context.Context, pool PoolID, owner Owner, max int, ttl time.Duration, t Ticket) (granted bool, ahead int, err error)

	// Dequeue takes owner's ticket out of pool's line, and frees a slot
	// handed to it and not yet claimed, which goes to the next ticket.
	Dequeue(ctx context.Context, pool PoolID, owner Owner) error
}

// Notifier is a Liner that tells its clients when a slot of a pool is handed
// to a ticket, so that waiters are woken, not polling. Implemented by
// memstore, pgstore and redisstore; memstore notifies in-process, pgstore
// with LISTEN/NOTIFY, redisstore with sharded pub/sub.
type Notifier interface {
	// Notify calls fn with the owners of the tickets handed a slot of pool,
	// on whatever client the slot freed, until stop is called. fn must not
	// block. A notification can be lost (a reconnection): waiters also poll.
	// Notify returns once notifications flow, so that a Queue made after it
	// returns cannot miss its own.
	Notify(ctx context.Context, pool PoolID, fn func(granted []Owner)) (stop func(), err error)
}
