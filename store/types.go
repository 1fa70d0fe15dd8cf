package store

import (
	"encoding/hex"
	"time"
)

// PoolID identifies a pool (a family, a limit name and a key) to a store.
// Its first four bytes are the name's Tag, shared by every pool of the name
// (so that an inspection finds a limit's pools without reading anyone
// else's), and its other twelve are 96 bits of SHA-256 over the family, the
// name and the key. Stores never see a key in clear, and any key fits any
// store's key limits.
type PoolID [16]byte

// Tag returns the pool's tag: the first four bytes.
func (p PoolID) Tag() Tag { return Tag(p[:4]) }

// String returns the identity in lower-case hex.
func (p PoolID) String() string { return hex.EncodeToString(p[:]) }

// Tag is the first four bytes of the pools of one limit name: a hash of the
// family and the name. Tags of different names may collide (1 in 2³² for a
// pair): an inspection then shows the other name's pools too.
type Tag [4]byte

// String returns the tag in lower-case hex.
func (t Tag) String() string { return hex.EncodeToString(t[:]) }

// Owner is the token that names one lease inside its pool. Release and Renew
// name it, so a holder whose lease expired cannot free or extend a slot that
// someone else took since. No caller's owner is zero (KeptFor).
type Owner [16]byte

// String returns the token in lower-case hex.
func (o Owner) String() string { return hex.EncodeToString(o[:]) }

// KeptFor is the owner of the slots a parent keeps for a key (Parent.Keep):
// a lease of the key that its next caller takes over.
var KeptFor = Owner{}

// NodeID identifies one process (a node) among those sharing a store. A
// lease owner whose first eight bytes are a node's ID is that node's member
// (Store.Sync).
type NodeID [8]byte

// Demand is what an owner asks of a pool (Acquire), or gives back
// (Release): the pool and the owner are the calls' own arguments, so that
// a Demand holds no array and goes in registers (a call with a Demand
// costs what one with scalars does).
type Demand struct {
	Max int           // the pool's max, at least 1
	TTL time.Duration // the lease's

	// Line, on Acquire, queues a refused caller in the pool's line (Lines):
	// a zero Line takes no ticket.
	Line Ticket

	// Pinned, on Acquire, holds the slot with no expiry (Pinned); TTL is
	// then only what an inspection shows as its time left.
	Pinned bool

	// Shared is what a lease that takes more than one slot, or whose pool
	// shares a parent, adds (Shares); nil for a plain slot. Stores read it
	// and never change it: the Limiter builds it once per limit.
	Shared *Shared

	// Held, on Release of a parent's key's lease (Shares), is how long its
	// holder used it, by the holder's clock: the slot-time its key is
	// charged (see Shares). 0: the store's own count, from the grant to
	// the release, which also counts a handoff's and the release's delays.
	Held time.Duration

	// Fence, on Acquire (Fences), asks for a fencing token with the grant
	// (Grant.Token): a number above every token granted before it in the
	// pool — a new grant, a lease extended and granted again, and a slot
	// handed to a ticket and claimed alike — that a system the holder
	// writes to can compare, to refuse a holder whose lease was lost
	// after a newer holder wrote. Tokens are per pool (per key's pool of
	// a parent, too); a renewal keeps the lease's token.
	Fence bool
}

// Shared is the weight and the parent of a Demand.
type Shared struct {
	Weight int    // slots the lease takes, at least 1
	Parent Parent // the total the pool shares with other keys' pools; a zero Pool when none
}

// Plain reports whether d takes one slot and has no parent.
func (d *Demand) Plain() bool { return d.Shared == nil }

// Weight returns the slots d takes.
func (d *Demand) Weight() int {
	if d.Shared == nil {
		return 1
	}
	return max(d.Shared.Weight, 1)
}

// HasParent reports whether d's pool shares a parent.
func (d *Demand) HasParent() bool { return d.Shared != nil && d.Shared.Parent.Pool != PoolID{} }

// Parent is the total a demand's pool shares with other keys' pools. When
// nobody waits, a key may use the parent's idle capacity up to its own max;
// when keys wait, each slot that frees in the parent goes to the waiting key
// furthest below its fair share: first the keys below their minimum, then
// the key holding the fewest slots for its share, the oldest waiter on a
// tie. The parent's line decides, and its pool is the one Notify names.
type Parent struct {
	Pool  PoolID        // zero: no parent
	Max   int           // at least the demand's Max
	Share int           // the key's weight in the fair share, at least 1
	Min   int           // slots up to which the key is served first
	Keep  time.Duration // on release, how long a freed slot is kept for its key
}

// MaxTTL is the longest TTL a demand or a renewal asks for (keycap.MaxTTL):
// far beyond any holder's renewal, and far from where a clock plus a TTL
// would overflow.
const MaxTTL = 10 * 365 * 24 * time.Hour

// Grant is what Acquire answers.
type Grant struct {
	Granted bool   // the owner holds the lease
	Ahead   int    // refused with a ticket: how many tickets wait before the owner's (0: next)
	Token   uint64 // granted with Demand.Fence (Fences): the grant's fencing token
}

// Ticket is a place in a pool's wait line (Lines).
//
// When a slot frees, it is handed to the ticket at the head of the line: it
// becomes a lease of the ticket's owner that expires after the ticket's
// Claim, and counts against max. The owner claims it by acquiring again,
// which extends it to the lease's TTL. A ticket the owner already has keeps
// its place, and its TTL and Claim are refreshed by each Acquire.
type Ticket struct {
	// TTL: the ticket expires unless its owner acquires again within TTL,
	// so a waiter that is gone (a cancelled request, a dead server) never
	// blocks the line. Zero: no ticket.
	TTL time.Duration
	// Claim: how long a slot handed to the ticket is reserved for its owner;
	// unclaimed by then, it passes to the next ticket.
	Claim time.Duration
}

// Renewal is one lease to renew in a Store.Renew batch.
type Renewal struct {
	Pool   PoolID
	Owner  Owner
	TTL    time.Duration
	Weight int    // 0 or 1 for a plain lease
	Parent PoolID // the parent's pool, zero when none

	// Set by the store.
	Lost bool  // the lease had expired or was unknown: it is gone
	Err  error // the store could not renew this lease; its fate is unknown
}

// SyncPool is one pool of a Store.Sync batch.
type SyncPool struct {
	Pool    PoolID
	Members []Owner // the node's live members; none empties the node's part

	// Set by the store.
	Removed int   // ghosts removed: node's members that were not in Members
	Err     error // the store could not sync this pool
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

// Override is a stored change of one key's limit (keycap.Override), as a
// store keeps it: the store needs only Pool and TTL, and keeps the rest to
// give it back.
type Override struct {
	Pool   PoolID
	Family uint8 // the limit's family, as keycap numbers it
	Name   string
	Key    string
	Max    int // -1: unchanged
	Share  int // 0: unchanged
	// TTL ends the override by itself after this long; 0 never. Read back,
	// it is the time left.
	TTL time.Duration
}

// Total is the stored value of an adaptive total (Totals): its version, the
// period whose reports decided it, and its state, opaque to the store.
type Total struct {
	Version int64 // 0: none decided
	State   []byte
}
