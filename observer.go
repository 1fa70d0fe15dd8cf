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
	// StoreFailed: the store failed (Err) during an operation for Limit, in
	// its partition Node ("" for a store of one node). It is reported once
	// per outage, at its first failure: a node that fails on and off is one
	// outage.
	StoreFailed
	// StoreRecovered: the store's partition Node answered again, and has not
	// failed for the Limiter's recover-after time (WithRecoverAfter), after a
	// StoreFailed: the outage lasted Held and
	// saw Failures failed calls.
	StoreRecovered
)

var kindNames = [...]string{
	SlotAcquired:   "slot acquired",
	LimitExceeded:  "limit exceeded",
	SlotReleased:   "slot released",
	LeaseLost:      "lease lost",
	StoreFailed:    "store failed",
	StoreRecovered: "store recovered",
}

// String returns the kind in words, such as "slot acquired".
func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown event"
}

// Event is what an Observer receives. Fields that do not apply to a kind are
// zero.
type Event struct {
	Kind     EventKind
	Limit    Limit         // the limit concerned; its Key is the key as given
	Waited   time.Duration // SlotAcquired, LimitExceeded
	Held     time.Duration // SlotReleased, LeaseLost; StoreRecovered: the outage's length
	Node     string        // StoreFailed, StoreRecovered: the store's partition
	Failures int64         // StoreRecovered: failed calls during the outage
	Err      error         // StoreFailed
}

// Observer receives the events of a Limiter. Observe is called synchronously
// on the goroutine that caused the event, so it must be quick and safe for
// concurrent use.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Observers returns an Observer that passes each event to every observer in
// turn. Nil observers are skipped.
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

func (m multiObserver) Observe(e Event) {
	for _, o := range m {
		o.Observe(e)
	}
}

// NewSlogObserver returns an Observer that logs events to logger: store
// failures at Error, lost leases at Warn, recoveries at Info, and refusals,
// acquired and released slots at Debug (they happen on every request: count
// them with metrics). Keys are not logged: they may be
// private or long. A nil logger means slog.Default().
func NewSlogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return slogObserver{logger}
}

type slogObserver struct{ log *slog.Logger }

func (s slogObserver) Observe(e Event) {
	level := slog.LevelDebug
	attrs := []slog.Attr{
		slog.String("limit", e.Limit.Name()),
		slog.Int("max", e.Limit.Max()),
	}
	switch e.Kind {
	case StoreFailed:
		level = slog.LevelError
		attrs = append(attrs, slog.Any("error", e.Err))
		if e.Node != "" {
			attrs = append(attrs, slog.String("node", e.Node))
		}
	case LeaseLost:
		level = slog.LevelWarn
		attrs = append(attrs, slog.Duration("held", e.Held))
	case StoreRecovered:
		level = slog.LevelInfo
		attrs = append(attrs, slog.Duration("down", e.Held), slog.Int64("failures", e.Failures))
		if e.Node != "" {
			attrs = append(attrs, slog.String("node", e.Node))
		}
	case LimitExceeded:
		attrs = append(attrs, slog.Duration("waited", e.Waited))
	case SlotAcquired:
		attrs = append(attrs, slog.Duration("waited", e.Waited))
	case SlotReleased:
		attrs = append(attrs, slog.Duration("held", e.Held))
	}
	ctx := context.Background()
	if !s.log.Enabled(ctx, level) {
		return
	}
	s.log.LogAttrs(ctx, level, "keycap: "+e.Kind.String(), attrs...)
}
