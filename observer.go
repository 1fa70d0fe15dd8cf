package keycap

import (
	"context"
	"log/slog"
	"time"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// SlotAcquired: a slot of Limit was granted, after Waited.
	SlotAcquired EventKind = iota + 1
	// LimitExceeded: Limit refused a slot, after Waited.
	LimitExceeded
	// SlotReleased: a slot of Limit was released after being held for Held.
	// Every SlotAcquired is followed by exactly one SlotReleased.
	SlotReleased
	// LeaseLost: a held slot of Limit was found gone on renewal (it expired,
	// typically because the process could not renew it in time), after being
	// held for Held. SlotReleased still follows when the lease is released.
	LeaseLost
	// GhostsDropped: the node's heartbeat dropped Count of its members of
	// Limit's pool that the store still held after they were released (a
	// release that never reached it).
	GhostsDropped
	// StoreFailed: the store failed (Err) during an operation for Limit, in
	// its partition Node ("" for a store of one node). It is reported once
	// per outage, at its first failure: a node that fails on and off is one
	// outage.
	StoreFailed
	// StoreRecovered: the store's partition Node answered again, and has not
	// failed for the Limiter's recover-after time (WithRecoverAfter), after a
	// StoreFailed: the outage lasted Held and saw Failures failed calls.
	StoreRecovered
	// Throttled: a response from API was throttled (Status, Wait, Source).
	Throttled
	// Exhausted: a response from API went through but said nothing remains
	// (Wait, Source): the API is paused before its 429.
	Exhausted
	// Paused: API is now paused for Wait (a pause started or extended).
	Paused
	// CallHeld: a call to API was refused without being sent, or a job was
	// released, because API is paused (Wait left) or over its rate (Paced).
	CallHeld
	// CallRetried: a throttled request to API was sent again after waiting
	// Wait in place.
	CallRetried
	// ProcessOverloaded: a store call for Limit ran out of its decision
	// budget, after Waited, but the store had it for less than half of the
	// budget while this process was running (Err: a *BudgetError with
	// Overloaded set, which says how long): its request waited in the
	// process to be sent, or the process did not run on time (CPU
	// starvation). The limit's fail mode applied, as for a store failure,
	// but it is no outage: neither StoreFailed nor StoreRecovered follows
	// from it. Node is the partition the call was for. Reported for every
	// such call.
	ProcessOverloaded
	// TotalChanged: an adaptive parent's total moved (Tuning says to
	// what, from what, and why). Every process reports the changes it
	// follows.
	TotalChanged
)

var kindNames = [...]string{
	SlotAcquired:      "slot acquired",
	LimitExceeded:     "limit exceeded",
	SlotReleased:      "slot released",
	LeaseLost:         "lease lost",
	GhostsDropped:     "ghosts dropped",
	StoreFailed:       "store failed",
	StoreRecovered:    "store recovered",
	Throttled:         "throttled",
	Exhausted:         "exhausted",
	Paused:            "paused",
	CallHeld:          "call held",
	CallRetried:       "call retried",
	ProcessOverloaded: "process overloaded",
	TotalChanged:      "total changed",
}

// String returns the kind in words, such as "slot acquired".
func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown event"
}

// Event is what an Observer receives, from every front door: slots of HTTP
// requests, jobs and connections, and pauses of APIs. Family says which sent
// it. Fields that do not apply to a kind are zero.
type Event struct {
	Kind   EventKind
	Family Family // the front door: FamilyApp (HTTP, the application), FamilyJob, FamilyConn, FamilyPause
	Limit  Limit  // slot events, GhostsDropped, StoreFailed, ProcessOverloaded: the limit; its Key is the key as given

	// Waited and Held start from a clock that ticks every millisecond: each
	// may be up to about a millisecond long, never short.
	Waited time.Duration // SlotAcquired, LimitExceeded, ProcessOverloaded
	Held   time.Duration // SlotReleased, LeaseLost; StoreRecovered: the outage's length
	Count  int           // GhostsDropped

	Node     string // StoreFailed, StoreRecovered, ProcessOverloaded: the store's partition
	Failures int64  // StoreRecovered: failed calls during the outage
	Err      error  // StoreFailed, ProcessOverloaded

	API    string        // Throttled, Exhausted, Paused, CallHeld, CallRetried
	Wait   time.Duration // Throttled, Exhausted, Paused, CallHeld, CallRetried
	Status int           // Throttled: the response's status
	Source string        // Throttled, Exhausted: the signal that gave the wait
	Paced  bool          // CallHeld: over the API's rate rather than paused

	Tuning *Tuning // TotalChanged
}

// Observer receives the events of a Limiter and of the front doors built on
// it. Observe is called synchronously on the goroutine that caused the
// event, so it must be quick and safe for concurrent use. That goroutine
// is the caller's for the events of a call (a panic there goes back to the
// caller, and the call's slots are released), and the Limiter's or the
// store's own for what happens in the background (renewals, a lost lease,
// the outcome of a release the caller did not wait for): a panic there
// ends the process, as any goroutine's does.
type Observer interface {
	Observe(Event)
}

// ContextObserver is an Observer that also wants the context of the call
// that caused an event, where there is one: an Acquire's, for its
// SlotAcquired and LimitExceeded events, so that a tracing observer adds
// them to the caller's span. The Limiter calls ObserveContext instead of
// Observe for those events, and Observe for the others (a release, a
// renewal, a store's recovery have no caller's context).
type ContextObserver interface {
	Observer
	ObserveContext(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Observers returns an Observer that passes each event to every observer in
// turn. Nil observers are skipped. An observer that panics does not keep the
// event from the others: the first panic goes on once every observer has
// had the event, so that each observer sees the same balanced events.
func Observers(obs ...Observer) Observer {
	var list multiObserver
	for _, o := range obs {
		switch o := o.(type) {
		case nil:
		case multiObserver:
			list = append(list, o...)
		default:
			list = append(list, o)
		}
	}
	if len(list) == 1 {
		return list[0]
	}
	return list
}

type multiObserver []Observer

func (m multiObserver) Observe(e Event) { m.each(func(o Observer) { o.Observe(e) }) }

// ObserveContext passes ctx on to the observers that take one.
func (m multiObserver) ObserveContext(ctx context.Context, e Event) {
	m.each(func(o Observer) { observe(ctx, o, e) })
}

// each calls fn with every observer, even when one panics: the first panic
// goes on once all had their call.
func (m multiObserver) each(fn func(Observer)) {
	var first any
	for _, o := range m {
		func() {
			defer func() {
				if r := recover(); r != nil && first == nil {
					first = r
				}
			}()
			fn(o)
		}()
	}
	if first != nil {
		panic(first)
	}
}

// observe gives e to o, with ctx when o takes one.
func observe(ctx context.Context, o Observer, e Event) {
	if co, ok := o.(ContextObserver); ok {
		co.ObserveContext(ctx, e)
		return
	}
	o.Observe(e)
}

// NewSlogObserver returns an Observer that logs events to logger: store
// failures at Error, lost leases, calls lost to an overloaded process and
// throttled APIs at Warn, recoveries, pauses and adaptive totals' changes
// at Info, and refusals,
// acquired and released slots and held calls at Debug (they happen on
// every request: count them with metrics). Keys are not logged: they may
// be private or long. A nil logger means slog.Default().
func NewSlogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return slogObserver{logger}
}

type slogObserver struct{ log *slog.Logger }

func (s slogObserver) Observe(e Event) {
	level := slog.LevelDebug
	attrs := []slog.Attr{slog.String("family", e.Family.String())}
	if e.Limit.valid() {
		attrs = append(attrs, slog.String("limit", e.Limit.Name()), slog.Int("max", e.Limit.Max()))
		if e.Limit.spec.Shadow {
			attrs = append(attrs, slog.Bool("shadow", true))
		}
	}
	if e.API != "" {
		attrs = append(attrs, slog.String("api", e.API))
	}
	switch e.Kind {
	case StoreFailed:
		level = slog.LevelError
		attrs = append(attrs, slog.Any("error", e.Err))
		if e.Node != "" {
			attrs = append(attrs, slog.String("node", e.Node))
		}
	case ProcessOverloaded:
		level = slog.LevelWarn
		attrs = append(attrs, slog.Any("error", e.Err), slog.Duration("waited", e.Waited))
		if e.Node != "" {
			attrs = append(attrs, slog.String("node", e.Node))
		}
	case StoreRecovered:
		level = slog.LevelInfo
		attrs = append(attrs, slog.Duration("down", e.Held), slog.Int64("failures", e.Failures))
		if e.Node != "" {
			attrs = append(attrs, slog.String("node", e.Node))
		}
	case LeaseLost:
		level = slog.LevelWarn
		attrs = append(attrs, slog.Duration("held", e.Held))
	case GhostsDropped:
		level = slog.LevelInfo
		attrs = append(attrs, slog.Int("count", e.Count))
	case LimitExceeded, SlotAcquired:
		attrs = append(attrs, slog.Duration("waited", e.Waited))
	case SlotReleased:
		attrs = append(attrs, slog.Duration("held", e.Held))
	case Throttled, Exhausted:
		level = slog.LevelWarn
		attrs = append(attrs, slog.Int("status", e.Status), slog.Duration("wait", e.Wait), slog.String("source", e.Source))
	case Paused:
		level = slog.LevelInfo
		attrs = append(attrs, slog.Duration("wait", e.Wait))
	case CallHeld, CallRetried:
		attrs = append(attrs, slog.Duration("wait", e.Wait), slog.Bool("paced", e.Paced))
	case TotalChanged:
		level = slog.LevelInfo
		if t := e.Tuning; t != nil {
			attrs = append(attrs, slog.String("parent", t.Parent), slog.Int("total", t.Total), slog.Int("previous", t.Previous),
				slog.String("reason", t.Reason), slog.Bool("shadow", t.Shadow), slog.Duration("latency", t.Mean),
				slog.Duration("baseline", t.Baseline), slog.Float64("in_flight", t.InFlight), slog.Int64("overloads", t.Overloads))
		}
	}
	ctx := context.Background()
	if !s.log.Enabled(ctx, level) {
		return
	}
	s.log.LogAttrs(ctx, level, "keycap: "+e.Kind.String(), attrs...)
}
