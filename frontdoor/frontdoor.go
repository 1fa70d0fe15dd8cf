// Package frontdoor is what keycap's front doors build on beyond a
// Limiter's Acquire and Do: store calls that are not leases (a pause, a
// pace, a mark) under the Limiter's decision budget and outage accounting,
// events of their own, member leases kept by the node's heartbeat
// (connections), and parking (a job that goes back to its queue keeps its
// place in the line). httplimit, joblimit, conncap and pause use it; a
// front door written elsewhere uses it the same way. An application needs
// none of it.
//
// A front door is a thin adapter over one *keycap.Limiter: it turns its own
// event (a request starts, a job is picked up) into a lease and its end into
// a release, carries a keycap.Spec for its limits, and adds no lease life,
// outage tracking or observer of its own.
package frontdoor

import (
	"context"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/link"
	"github.com/keycap/keycap/store"
)

// engine is what package keycap hands over through internal/link.
type engine interface {
	Emit(e keycap.Event)
	Call(ctx context.Context, lim keycap.Limit, op func(context.Context) error) error
	Store() store.Store
	Node() string
	HeartbeatInterval() time.Duration
	Labels() bool
	AcquireMember(ctx context.Context, member string, limits []keycap.Limit) (*keycap.Lease, error)
	Heartbeat(ctx context.Context) error
	Withdraw(ctx context.Context) error
	AcquireOrPark(ctx context.Context, owner store.Owner, parkFor, claim time.Duration, wake func(), limits []keycap.Limit) (*keycap.Lease, error)
	Unpark(owner store.Owner, limits []keycap.Limit)
	Since(ctx context.Context, name, id string, ttl time.Duration) (time.Duration, error)
}

func of(l *keycap.Limiter) engine { return link.Door(l).(engine) }

// Emit sends e to l's observer, so that one observer sees every front
// door's events. An Event with a Limit takes the limit's family.
func Emit(l *keycap.Limiter, e keycap.Event) { of(l).Emit(e) }

// Call runs op, a call to l's store that a front door makes on lim's behalf
// (a pause, a pace, a mark), within lim's decision budget, and accounts for
// it as the Limiter's own calls are: a failure counts in the outage of the
// store's partition that holds lim's pool (reported once, as StoreFailed),
// a success may end it. It returns op's error, a *keycap.BudgetError when
// the budget ran out first, or the context's error when ctx ended, which is
// never a store failure.
func Call(ctx context.Context, l *keycap.Limiter, lim keycap.Limit, op func(ctx context.Context) error) error {
	return of(l).Call(ctx, lim, op)
}

// Store returns l's store, for the calls a front door makes through Call.
func Store(l *keycap.Limiter) store.Store { return of(l).Store() }

// Need returns nil when l's store has every feature of f, and otherwise an
// error matching keycap.ErrNotSupported that names what it lacks: a front
// door checks what it needs when it is built.
func Need(l *keycap.Limiter, f store.Features) error { return store.Need(Store(l), f) }

// Node returns the name of l's node (keycap.WithNode).
func Node(l *keycap.Limiter) string { return of(l).Node() }

// HeartbeatInterval returns how often l's node heartbeat runs
// (keycap.WithHeartbeat).
func HeartbeatInterval(l *keycap.Limiter) time.Duration { return of(l).HeartbeatInterval() }

// Labels reports whether l keeps its callers' labels (keycap.WithInspection):
// a front door attaches one (keycap.WithLabel) only then.
func Labels(l *keycap.Limiter) bool { return of(l).Labels() }

// AcquireMember is Acquire for a lease that belongs to l's node as its
// member named member — a WebSocket connection, say, that lives as long as
// the node serves it. Such leases are kept alive not one by one but by the
// node's heartbeat (keycap.WithHeartbeat): one Store.Sync batch, one round
// trip per store node, makes the node's part of every pool it touches
// exactly its live members: renewed, put back if the store lost them (even
// beyond max: the node holds them), and the node's ghosts, members whose
// release never reached the store, dropped. So a lost release costs a slot
// for at most one heartbeat, and a node that dies frees its members within
// their TTL with nobody's help. A member lease is never lost.
//
// The lease's owner is the node's ID and a hash of member: acquiring a
// member again, while its lease is held, extends the same slot. Keep one
// lease per member. The store must keep members (store.Members). A member
// lease's TTL is its spec's, which must exceed the heartbeat, or, for a
// spec with none, three heartbeats. A limit failing open
// admits the member uncounted; the first heartbeat after the store recovers
// counts it.
func AcquireMember(ctx context.Context, l *keycap.Limiter, member string, limits ...keycap.Limit) (*keycap.Lease, error) {
	return of(l).AcquireMember(ctx, member, limits)
}

// Heartbeat renews l's node's member leases and drops its ghosts now, as
// the heartbeat loop does every interval.
func Heartbeat(ctx context.Context, l *keycap.Limiter) error { return of(l).Heartbeat(ctx) }

// Withdraw removes every member lease of l's node from the store, in one
// Sync batch, so that their slots are free at once: call it when the node
// stops serving its members (conncap.Cap.Close does). Releasing a withdrawn
// lease afterwards does nothing more.
func Withdraw(ctx context.Context, l *keycap.Limiter) error { return of(l).Withdraw(ctx) }

// Parking is how a caller that cannot wait in place (a job that goes back
// to its queue) keeps its place in a line: AcquireOrPark.
type Parking struct {
	// Owner names the caller on each of its attempts, so that the attempt
	// that comes back claims the slot handed to its ticket: OwnerFor.
	Owner store.Owner
	// For is how long the ticket waits for its owner to come back: the
	// caller's fallback delay, after which it tries again anyway.
	For time.Duration
	// Claim is how long a slot handed to the ticket stays reserved for the
	// owner, the time it needs to come back once woken.
	Claim time.Duration
	// Wake is called, once, in a goroutine of its own, when a slot is
	// handed to the ticket: it makes the caller come back now (for a job,
	// River's JobRetry, asynq's RunTask).
	Wake func()
}

// OwnerFor returns the owner token of the caller named id (a job's pool,
// key, ID and attempt, say): the same id always gives the same token.
func OwnerFor(id string) store.Owner { return store.Owner(store.PoolOf(store.Internal, "owner", id)) }

// AcquireOrPark is Acquire for a caller that waits in place for the limits'
// wait, as Acquire does, and then, instead of leaving the line, parks: its
// ticket stays for p.For, and when a slot is handed to it, on any client of
// the store, p.Wake is called. The caller's next AcquireOrPark with the same
// p.Owner claims that slot (within p.Claim). A parked caller gets a
// *keycap.LimitError with Parked set.
//
// The store must keep lines and notify (store.Lines, store.Notifications);
// on another store AcquireOrPark is Acquire, and never parks. A parked
// ticket lives in the store: a wake-up lost with its process leaves the slot
// reserved for p.Claim, then it passes on; the caller comes back at its own
// fallback delay and queues again.
func AcquireOrPark(ctx context.Context, l *keycap.Limiter, p Parking, limits ...keycap.Limit) (*keycap.Lease, error) {
	return of(l).AcquireOrPark(ctx, p.Owner, p.For, p.Claim, p.Wake, limits)
}

// Unpark takes owner out of the lines of limits, where AcquireOrPark parked
// it, for a caller that will not come back (a job that failed instead): its
// ticket, and a slot already handed to it, go to the next in line now rather
// than when they expire. In the background, within the budget.
func Unpark(l *keycap.Limiter, owner store.Owner, limits ...keycap.Limit) {
	of(l).Unpark(owner, limits)
}

// Since returns how long ago the mark (name, id) was set, by the store's
// clock, and sets it now (returning 0) if it is not set: a start time that
// every process sharing the store sees alike. A mark is forgotten ttl after
// it was set. One store call, through Call. The store must keep marks
// (store.Marks); else the error matches keycap.ErrNotSupported. joblimit
// and pause use it for jobs' deadlines.
func Since(ctx context.Context, l *keycap.Limiter, name, id string, ttl time.Duration) (time.Duration, error) {
	return of(l).Since(ctx, name, id, ttl)
}
