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
