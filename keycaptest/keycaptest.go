// Package keycaptest helps applications test code that uses keycap.
//
// There is nothing to fake: keycap runs in-process on memstore, so tests use
// the real Limiter. A Recorder, installed as the Limiter's observer, lets a
// test assert that a route or a job is limited:
//
//	rec := &keycaptest.Recorder{}
//	limiter, _ := keycap.NewLimiter(memstore.New(), keycap.WithObserver(rec))
//	// ... serve a request ...
//	if rec.Count(keycap.SlotAcquired, "exports") != 1 {
//		t.Error("POST /exports is not limited by \"exports\"")
//	}
//
// To test the refusal path, make the limit refuse every request: a limit of
// max 0 refuses at once, without waiting and without a store call.
package keycaptest

import (
	"slices"
	"sync"

	"github.com/keycap/keycap"
)

// Recorder is a keycap.Observer that keeps every event. The zero value is
// ready to use; it is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []keycap.Event
}

// Observe implements keycap.Observer.
func (r *Recorder) Observe(e keycap.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the events recorded so far, in order.
func (r *Recorder) Events() []keycap.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Count returns how many events of kind were recorded for limits named name,
// or for every limit when name is empty.
func (r *Recorder) Count(kind keycap.EventKind, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == kind && (name == "" || e.Limit.Name() == name) {
			n++
		}
	}
	return n
}

// Reset forgets the events recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.events = nil
	r.mu.Unlock()
}
