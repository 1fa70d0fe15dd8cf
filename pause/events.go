package pause

import "time"

// EventKind says what an Event reports.
type EventKind uint8

const (
	// Throttled: a response from API was throttled (Status, Wait, Source).
	Throttled EventKind = iota + 1
	// Exhausted: a response from API went through but said nothing remains
	// (Wait, Source): the API is paused before its 429.
	Exhausted
	// Paused: API is now paused for Wait (a pause started or extended).
	Paused
	// Refused: a call to API was refused without being sent, or a job
	// released, because API is paused (Wait left) or over its rate (Paced).
	Refused
	// RetriedInPlace: a throttled request to API was sent again after waiting
	// Wait in place.
	RetriedInPlace
	// StoreFailed: the store failed (Err); reported once per outage.
	StoreFailed
	// StoreRecovered: the store answered again after a StoreFailed.
	StoreRecovered
)

// Event is what an Observer receives.
type Event struct {
	Kind   EventKind
	API    string
	Status int           // Throttled
	Wait   time.Duration // Throttled, Exhausted, Paused, Refused, RetriedInPlace
	Source string        // Throttled, Exhausted: the signal that gave the wait
	Paced  bool          // Refused: over the API's rate rather than paused
	Err    error         // StoreFailed
}

// Observer receives the events of Pauses, synchronously: it must be quick and
// safe for concurrent use.
type Observer interface {
	ObservePause(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// ObservePause calls f(e).
func (f ObserverFunc) ObservePause(e Event) { f(e) }
