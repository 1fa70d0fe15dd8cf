package keycap

import "time"

// SetPollInterval replaces the interval between a waiter's polls.
func (l *Limiter) SetPollInterval(d time.Duration) { l.poll = func() time.Duration { return d } }
