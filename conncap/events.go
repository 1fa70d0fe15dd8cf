package conncap

// EventKind says what an Event reports.
type EventKind uint8

const (
	// Admitted: Conn of User was admitted (Uncounted: while the store was
	// down, failing open).
	Admitted EventKind = iota + 1
	// Refused: Conn of User was refused: over Cap, or (Err) the store failed
	// and the Cap fails closed.
	Refused
	// Left: Conn of User left.
	Left
	// GhostsDropped: a heartbeat dropped Count of this node's connections
	// that the store still held after they left.
	GhostsDropped
	// StoreFailed: the store failed (Err); reported once per outage.
	StoreFailed
	// StoreRecovered: the store answered again after a StoreFailed.
	StoreRecovered
)

// Event is what an Observer receives. Fields that do not apply are zero.
type Event struct {
	Kind      EventKind
	App       string
	User      string
	Conn      string
	Cap       int
	Count     int
	Uncounted bool
	Err       error
}

// Observer receives a Cap's events, synchronously: it must be quick and safe
// for concurrent use.
type Observer interface {
	ObserveConn(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// ObserveConn calls f(e).
func (f ObserverFunc) ObserveConn(e Event) { f(e) }
