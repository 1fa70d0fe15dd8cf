// Package coarse is a monotonic clock read with one or two atomic loads: a
// goroutine refreshes it every Tick while it is read, and stops when it has
// not been read for Idle, so an idle process spends nothing on it.
//
// A reading is never ahead of the precise clock and, while the refreshing
// goroutine runs on time, at most one Tick behind it. Code that sets an
// expiry from it adds Tick, so that what it times never ends early.
//
// Once Watch is called, the refreshing goroutine also notes when the
// process did not run on time (stall.go), for Stalled.
package coarse

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	// Tick is how often the clock is refreshed while it is read.
	Tick = time.Millisecond
	// Idle is how long the clock keeps ticking unread.
	Idle = 20 * time.Millisecond
)

var (
	base = time.Now()
	now  atomic.Int64 // time since base, as of the last tick
	// used: read since the last tick. Only mark sets it, and only while
	// the ticker runs, so whoever finds it set may trust now.
	used atomic.Bool

	mu      sync.Mutex // guards running, and orders mark against the ticker's stop
	running bool
)

// Now returns the time since an arbitrary origin, shared by the process,
// at most about one Tick behind the precise clock.
func Now() time.Duration {
	if used.Load() { // the ticker runs
		return time.Duration(now.Load())
	}
	return mark()
}

// Precise returns the precise time on Now's scale.
func Precise() time.Duration { return time.Since(base) }

// mark is Now's other path, taken once a tick: it marks the clock read, and
// starts the ticker unless it runs.
func mark() time.Duration {
	mu.Lock()
	defer mu.Unlock()
	if !running {
		now.Store(int64(time.Since(base)))
		running = true
		var w watcher
		if watching.Load() {
			w.start() // with the ticker, not at some tick of it
		}
		go tick(w)
	}
	used.Store(true)
	return time.Duration(now.Load())
}

// tick refreshes the clock until it is not read for Idle; w is its part of
// the watch (stall.go).
func tick(w watcher) {
	t := time.NewTicker(Tick)
	defer t.Stop()
	unread := 0
	prev := time.Since(base)
	defer w.stop()
	for range t.C {
		cur := time.Since(base)
		now.Store(int64(cur))
		if watching.Load() {
			w.tick(prev, cur)
		}
		prev = cur
		if used.Load() {
			used.Store(false)
			unread = 0
			continue
		}
		if unread++; time.Duration(unread)*Tick >= Idle {
			mu.Lock()
			if !used.Load() {
				running = false
				mu.Unlock()
				return
			}
			mu.Unlock()
			unread = 0
		}
	}
}
