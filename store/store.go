// Package store is what a keycap store implements: one interface, Store,
// and the values its methods take and return. Applications never import it;
// they pass a store (memstore, redisstore, pgstore, nullstore) to
// keycap.NewLimiter.
//
// A store declares what it can do with Features, and answers every method of
// a feature it lacks with an error matching ErrNotSupported. A store embeds
// Unsupported, which does exactly that for every optional method, and then
// writes three methods of its own: Acquire, Release and Renew. The Limiter
// reads Features once, when it is built, and never calls a method of a
// feature the store does not declare.
//
// A store that wraps another embeds it: it forwards the inner store's
// Features and every method it does not change, so it cannot claim a feature
// the inner store lacks. A wrapper that changes a call changes every call of
// the same kind (Release and ReleaseAsync, say), and one that changes what a
// feature promises masks it off (a wrapper that waits on a network drops
// InProcess from its Features).
//
// storetest is the conformance suite every store passes.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Store holds the leases of every pool. Each method must be atomic per pool:
// a pool never holds more than its max of unexpired slots, however many
// clients call at once. Expiry follows the store's own clock.
//
// A store returns an error only when it could not answer (a network failure,
// a timeout) or does not support the call (ErrNotSupported); a full pool or
// a lost lease is a result, not an error. When the caller's context ends, a
// store returns the context's error. Every method must return within a
// bounded time even when the caller's context has no deadline.
//
// The methods below Renew belong to the feature named beside them: a store
// that lacks it answers them with a *NotSupportedError (Unsupported does).
type Store interface {
	// Features reports what the store can do beyond Acquire, Release and
	// Renew of plain slots. It returns the same value every time.
	Features() Features

	// Acquire takes d.Weight() slots of pool for owner, expiring after
	// d.TTL, if the pool (and its parent, when d has one) has room, and
	// reports whether it did. If the owner already
	// holds a lease in the pool, Acquire extends it and grants it again.
	// In a store with Lines, a caller without a ticket is refused while
	// anyone waits in the pool's line.
	//
	// With d.Line set (Lines), a refused caller holds a ticket in the
	// pool's line, taken in the same call (see Ticket), and Grant.Ahead
	// says how many wait before it. With d.Pinned (Pinned), the slot never
	// expires. A weight above one or a parent needs Shares. A demand that
	// needs a feature the store does not declare is answered with a
	// *NotSupportedError, never served as another. One round trip.
	Acquire(ctx context.Context, pool PoolID, owner Owner, d Demand) (Grant, error)

	// Release frees owner's lease of pool (d says its weight and parent:
	// the weight the lease was granted with, which an Acquire by its
	// holder keeps whatever that Acquire's weight).
	// Releasing a lease that expired or was never granted does nothing.
	// With leave, the owner also leaves the pool's line (Lines): its
	// ticket is taken out, and a slot handed to it and not claimed yet
	// goes to the next ticket.
	//
	// With Shares, a slot freed by a key of a parent may be kept for that
	// key (Parent.Keep): Release reports kept, and the slot passes on at
	// the next call on the parent that finds it expired. One round trip.
	Release(ctx context.Context, pool PoolID, owner Owner, d Demand, leave bool) (kept bool, err error)

	// Renew extends each unexpired lease of batch to expire TTL from now,
	// and sets Lost on each lease that has expired or is unknown (it is
	// not resurrected: another holder may have been admitted since). It
	// makes as few round trips as the store allows, one where it can. An
	// error that only concerns some leases is set on their Err; the
	// returned error means that no lease's outcome is known.
	Renew(ctx context.Context, batch []Renewal) error

	// ReleaseAsync (AsyncRelease) starts Release(pool, owner, d, false)
	// and returns at once. done is called once with its outcome, on a
	// goroutine of the store's (or before ReleaseAsync returns, by a store
	// that had to wait), and must not block. An Acquire or Release of the same pool
	// that the store receives after ReleaseAsync returns is applied after
	// the release: an Acquire by the same process finds the slot free. A
	// read (InspectPools) is not ordered with it. A release not sent within
	// budget (0: no bound but the store's own timeouts) is not sent; done
	// then has an error.
	ReleaseAsync(pool PoolID, owner Owner, d Demand, budget time.Duration, done func(error))

	// Notify (Notifications) calls fn with the owners of the tickets handed
	// a slot of pool (a parent's pool, for the demands that share it), on
	// whatever client the slot freed, until stop is called. fn must not
	// block. A notification can be lost (a reconnection): waiters also
	// poll. Notify returns once notifications flow, so that an Acquire
	// made after it returns cannot miss its own.
	Notify(ctx context.Context, pool PoolID, fn func(granted []Owner)) (stop func(), err error)

	// Sync (Members) makes, in each pool of batch, node's members (leases
	// whose owner starts with node) exactly SyncPool.Members: each is
	// renewed to expire ttl from now, or added back if the store lost it
	// (even beyond max: the node holds it), and node's other members are
	// removed. Other nodes' members are untouched. One round trip per
	// store node. An error that concerns some pools only is set on their
	// Err; the returned error means that no pool's outcome is known.
	Sync(ctx context.Context, node NodeID, ttl time.Duration, batch []SyncPool) error

	// Mark (Marks) starts the mark id unless it is running, and returns its
	// age by the store's clock; started is true for the one call that
	// started it (whose age is 0). A mark is forgotten ttl after it
	// started. One round trip.
	Mark(ctx context.Context, id PoolID, ttl time.Duration) (age time.Duration, started bool, err error)

	// Pause (Pauses) makes id paused for at least d from now: a longer
	// pause already running is kept, a shorter one is extended,
	// atomically. It returns how long id is now paused. One round trip.
	Pause(ctx context.Context, id PoolID, d time.Duration) (time.Duration, error)

	// Paused (Pauses) returns how long id remains paused: 0 when it is not.
	Paused(ctx context.Context, id PoolID) (time.Duration, error)

	// Pace (Paces) takes one event from id's allowance under rate with the
	// generic cell rate algorithm: it returns 0 when the event may happen
	// now (and counts it), or how long until it may (and counts nothing).
	Pace(ctx context.Context, id PoolID, rate Rate) (time.Duration, error)

	// InspectPools (Inspection) returns a page of the pools whose ID
	// carries q.Tag and that hold a lease or a ticket. It reads; it never
	// changes a pool, and never lists the whole store at once. A pool that
	// exists for the whole paging is returned at least once.
	InspectPools(ctx context.Context, q PageQuery) (PoolPage, error)

	// InspectPauses (Inspection) returns a page of the pauses and paces of
	// q.Tag that are running.
	InspectPauses(ctx context.Context, q PageQuery) (PausePage, error)

	// SetOverride (Overrides) stores o, replacing the override of o.Pool,
	// expiring after o.TTL when it is positive. One round trip.
	SetOverride(ctx context.Context, o Override) error

	// DeleteOverride (Overrides) removes the override of pool, if any.
	DeleteOverride(ctx context.Context, pool PoolID) error

	// Overrides (Overrides) returns the overrides in force, with their time
	// left, and the version of the set, a number that changes with every
	// SetOverride and DeleteOverride and never repeats. When the version is
	// still since, it returns it with no list.
	Overrides(ctx context.Context, since uint64) (version uint64, list []Override, err error)

	// ReportTotal (Totals) keeps report as node's report for period of the
	// adaptive total id, replacing the node's earlier report of the same
	// period, for ttl; and returns id's total as stored (a zero Total when
	// none is) with every report of period − 1, in the order of their
	// nodes. Reports and states are opaque to the store. One round trip.
	ReportTotal(ctx context.Context, id PoolID, node NodeID, period int64, report []byte, ttl time.Duration) (Total, [][]byte, error)

	// SetTotal (Totals) replaces id's total with t, kept for ttl, if the
	// total stored is still at version prev (0: none is stored), and
	// returns the total stored after the call and whether it is t. So of
	// all the processes that decide a version, one wins, and the others
	// read what it decided. One round trip.
	SetTotal(ctx context.Context, id PoolID, prev int64, t Total, ttl time.Duration) (Total, bool, error)

	// Partition (Partitions) names the part of the store that holds pool,
	// which can fail alone (a Redis Cluster's slot range). The name stays
	// the same when the node behind it fails over. A store of one part
	// answers "".
	Partition(pool PoolID) string
}

// Features is the set of what a store can do beyond plain slots. A store
// declares it (Store.Features); the Limiter reads it once.
type Features uint32

const (
	// Lines: a wait line per pool. Acquire with Demand.Line queues a
	// refused caller; a slot that frees (a release, an expiry found by any
	// call, a caller leaving) is handed to the oldest live ticket.
	// Implemented by memstore, pgstore and redisstore.
	Lines Features = 1 << iota
	// Notifications: Notify tells the waiters of a pool when a slot is
	// handed to them. Implemented by memstore, pgstore and redisstore.
	Notifications
	// Shares: weighted leases and parents (Demand.Weight, Demand.Parent),
	// with the lines of Lines for the demands that wait. Implemented by
	// memstore, nullstore, pgstore and redisstore.
	//
	// The keys of a parent are served in this order, the fair share: a key
	// below its minimum first, fewest slots held for its minimum first;
	// then the key holding the fewest slots for its share; then the key
	// that has received the least slot-time for its share (its virtual
	// time); then the oldest head ticket. A key's virtual time grows, when
	// one of its leases is released, by the lease's slot-time (weight ×
	// Demand.Held, or the time the store saw it held, in ms) ÷ its share;
	// a lease that lapses is not charged. A key served is brought up to the
	// parent's virtual time, which then moves to the key's; a key that
	// starts to wait starts from it at the earliest, and a release never
	// leaves a key more than that lease ahead of it. So a key banks no credit while idle or while it held
	// more than others, and repays no slots it borrowed while nobody else
	// waited. A key that holds nothing and waits for nothing keeps its
	// virtual time for 10 s at most, then starts again from the parent's:
	// keys that never come back cost nothing. A fresh caller is granted
	// only before every waiting key (a tie goes to the waiter).
	Shares
	// Pinned: Demand.Pinned holds a slot with no expiry, for a holder that
	// cannot die without the store (the store lives in its process).
	// Implemented by memstore.
	Pinned
	// AsyncRelease: ReleaseAsync. Implemented by redisstore.
	AsyncRelease
	// Members: Sync, which keeps a node's member leases (connections).
	// Implemented by memstore, nullstore, pgstore and redisstore.
	Members
	// Marks: Mark. Implemented by memstore, nullstore, pgstore and
	// redisstore.
	Marks
	// Pauses: Pause and Paused. Implemented by memstore, nullstore, pgstore
	// and redisstore.
	Pauses
	// Paces: Pace. Implemented by memstore, nullstore, pgstore and
	// redisstore.
	Paces
	// Inspection: InspectPools and InspectPauses. Implemented by memstore,
	// pgstore and redisstore.
	Inspection
	// Overrides: SetOverride, DeleteOverride and Overrides. Implemented by
	// memstore, pgstore and redisstore.
	Overrides
	// Partitions: Partition, for a store whose parts fail alone.
	// Implemented by redisstore.
	Partitions
	// InProcess: no call ever waits on anything outside the process, so the
	// Limiter gives them no deadline. Implemented by memstore and
	// nullstore.
	InProcess
	// Fences: Demand.Fence, a fencing token with each grant (Grant.Token).
	// A token is above every token granted before it in the same pool,
	// and a grant's token is never 0. Implemented by memstore, pgstore and
	// redisstore.
	Fences
	// Totals: ReportTotal and SetTotal, the one value of an adaptive
	// total that every process agrees on, and the reports it is decided
	// from. Implemented by memstore, pgstore and redisstore.
	Totals

	lastFeature
)

var featureNames = []string{"lines", "notifications", "shares", "pinned", "async release", "members",
	"marks", "pauses", "paces", "inspection", "overrides", "partitions", "in process", "fences", "totals"}

// AllFeatures is every feature this version of the contract knows.
const AllFeatures = lastFeature - 1

// Has reports whether f has every feature of g.
func (f Features) Has(g Features) bool { return f&g == g }

// String lists the features, such as "lines|notifications"; "none" for
// none.
func (f Features) String() string {
	if f == 0 {
		return "none"
	}
	var names []string
	for i, name := range featureNames {
		if f&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	if rest := f &^ AllFeatures; rest != 0 {
		names = append(names, fmt.Sprintf("0x%x", uint32(rest)))
	}
	return strings.Join(names, "|")
}

// ErrNotSupported matches the error of a call to a feature the store does
// not declare. Its details are in a *NotSupportedError.
var ErrNotSupported = errors.New("keycap: not supported by the store")

// NotSupportedError is the error of a call that needs a feature the store
// lacks. It matches ErrNotSupported.
type NotSupportedError struct {
	Feature Features // what the call needs
	Store   string   // the store's type, as %T prints it
}

func (e *NotSupportedError) Error() string {
	if e.Store == "" {
		return fmt.Sprintf("keycap: the store does not support %s", e.Feature)
	}
	return fmt.Sprintf("keycap: the store %s does not support %s", e.Store, e.Feature)
}

// Is makes errors.Is(err, ErrNotSupported) true.
func (e *NotSupportedError) Is(target error) bool { return target == ErrNotSupported }

// UnansweredError is the error of a call whose context's deadline passed
// before the store answered it, from a store that can tell where the call
// spent its time. Outstanding is how long, before the deadline, the store
// had the call: from when its request — or the request it queued behind on
// its way to the same node — was handed to the client that sends it, until
// the deadline. The rest of the call waited in this process: for its turn,
// for a goroutine to send it. An Outstanding of 0 is a call that never
// left the process.
//
// The Limiter reads it to tell a slow store from a process too starved to
// get its calls through (keycap.BudgetError); a store that cannot tell
// returns the context's error alone, and is then taken to have had the
// call all along.
type UnansweredError struct {
	Err         error // the context's error
	Outstanding time.Duration
}

func (e *UnansweredError) Error() string {
	if e.Outstanding <= 0 {
		return fmt.Sprintf("%v (never sent)", e.Err)
	}
	return fmt.Sprintf("%v (sent %s before it)", e.Err, e.Outstanding.Round(time.Millisecond))
}

// Unwrap returns the context's error.
func (e *UnansweredError) Unwrap() error { return e.Err }

// Need returns a *NotSupportedError naming what s lacks of need, or nil
// when s has it all.
func Need(s Store, need Features) error {
	if lack := need &^ s.Features(); lack != 0 {
		return &NotSupportedError{Feature: lack, Store: fmt.Sprintf("%T", s)}
	}
	return nil
}

// Unsupported answers every optional method of Store with a
// *NotSupportedError, and declares no feature. A store embeds it and
// implements Acquire, Release and Renew, then whichever features it has
// (declaring them in its own Features).
type Unsupported struct{}

func unsupported(f Features) error { return &NotSupportedError{Feature: f} }

// Features declares no feature.
func (Unsupported) Features() Features { return 0 }

// ReleaseAsync calls done with a *NotSupportedError.
func (Unsupported) ReleaseAsync(_ PoolID, _ Owner, _ Demand, _ time.Duration, done func(error)) {
	done(unsupported(AsyncRelease))
}

// Notify returns a *NotSupportedError.
func (Unsupported) Notify(context.Context, PoolID, func([]Owner)) (func(), error) {
	return nil, unsupported(Notifications)
}

// Sync returns a *NotSupportedError.
func (Unsupported) Sync(context.Context, NodeID, time.Duration, []SyncPool) error {
	return unsupported(Members)
}

// Mark returns a *NotSupportedError.
func (Unsupported) Mark(context.Context, PoolID, time.Duration) (time.Duration, bool, error) {
	return 0, false, unsupported(Marks)
}

// Pause returns a *NotSupportedError.
func (Unsupported) Pause(context.Context, PoolID, time.Duration) (time.Duration, error) {
	return 0, unsupported(Pauses)
}

// Paused returns a *NotSupportedError.
func (Unsupported) Paused(context.Context, PoolID) (time.Duration, error) {
	return 0, unsupported(Pauses)
}

// Pace returns a *NotSupportedError.
func (Unsupported) Pace(context.Context, PoolID, Rate) (time.Duration, error) {
	return 0, unsupported(Paces)
}

// InspectPools returns a *NotSupportedError.
func (Unsupported) InspectPools(context.Context, PageQuery) (PoolPage, error) {
	return PoolPage{}, unsupported(Inspection)
}

// InspectPauses returns a *NotSupportedError.
func (Unsupported) InspectPauses(context.Context, PageQuery) (PausePage, error) {
	return PausePage{}, unsupported(Inspection)
}

// SetOverride returns a *NotSupportedError.
func (Unsupported) SetOverride(context.Context, Override) error { return unsupported(Overrides) }

// DeleteOverride returns a *NotSupportedError.
func (Unsupported) DeleteOverride(context.Context, PoolID) error { return unsupported(Overrides) }

// Overrides returns a *NotSupportedError.
func (Unsupported) Overrides(context.Context, uint64) (uint64, []Override, error) {
	return 0, nil, unsupported(Overrides)
}

// ReportTotal returns a *NotSupportedError.
func (Unsupported) ReportTotal(context.Context, PoolID, NodeID, int64, []byte, time.Duration) (Total, [][]byte, error) {
	return Total{}, nil, unsupported(Totals)
}

// SetTotal returns a *NotSupportedError.
func (Unsupported) SetTotal(context.Context, PoolID, int64, Total, time.Duration) (Total, bool, error) {
	return Total{}, false, unsupported(Totals)
}

// Partition answers "": the store is one part.
func (Unsupported) Partition(PoolID) string { return "" }
