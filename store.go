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

// NonBlocking is a Store whose calls never wait on anything outside the
// process. The decision budget does not apply to it: the Limiter gives its
// calls no deadline, and saves the cost of one. Implemented by memstore and
// nullstore.
type NonBlocking interface {
	NonBlocking()
}

// Renewal is one lease to renew in a Store.Renew batch.
type Renewal struct {
	Pool  PoolID
	Owner Owner
	TTL   time.Duration

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
	copy(n[:], p[:8])
	return n
}

// NodeOwner returns the owner token of a node's member named name: the node's
// ID followed by eight bytes of name's hash. The same node and name always
// give the same token, so acquiring with it is idempotent.
func NodeOwner(node NodeID, name string) Owner {
	p := PoolIDOf(familyInternal, "member", name)
	var o Owner
	copy(o[:8], node[:])
	copy(o[8:], p[:8])
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
