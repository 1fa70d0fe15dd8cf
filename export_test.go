package keycap

import (
	"time"

	"github.com/keycap/keycap/store"
)

// SetPollInterval replaces the interval between a waiter's polls.
func (l *Limiter) SetPollInterval(d time.Duration) { l.poll = func() time.Duration { return d } }

// Stamp returns what a Limiter stamped in the owner of one of its leases:
// its node's tag and when the lease was asked for; ok is false for an owner
// that carries no stamp.
func Stamp(o store.Owner) (node store.Tag, at time.Time, ok bool) { return stamp(o) }

// RefusalWindow is how far back a report's refusal rate looks.
const RefusalWindow = refusalWindow

// What the tests size their waits by.
const (
	LinePoll       = linePoll
	HandoffClaim   = handoffClaim
	MemberTTLBeats = memberTTLBeats
)

// TunerSteps returns how many intervals the Limiter's adaptive total of p
// has stepped through (0: none runs).
func (l *Limiter) TunerSteps(p *Parent) int64 {
	if t := l.tuners.find(p); t != nil {
		return t.steps.Load()
	}
	return 0
}

// Enforced returns the total the Limiter enforces for p now: the agreed
// one, or less while a cut made here holds (0: none runs).
func (l *Limiter) Enforced(p *Parent) int {
	if t := l.tuners.find(p); t != nil {
		return int(t.value.Load())
	}
	return 0
}

// SetTunerIdle replaces how long an idle adaptive total keeps running, and
// returns a function that puts it back.
func SetTunerIdle(d time.Duration) func() {
	old := idleFor
	idleFor = d
	return func() { idleFor = old }
}
