// Package coarse is a monotonic clock read with one atomic load: a
// goroutine refreshes it every Tick while it is read, and stops when it has
// not been read for Idle, so an idle process spends nothing on it.
//
// A reading is never ahead of the precise clock and, while the refreshing
// goroutine runs on time, at most one Tick behind it. Code that sets an
// expiry from it adds Tick, so that what it times never ends early.
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
	base    = time.Now()
	now     atomic.Int64 // time since base, as of the last tick
	running atomic.Bool  // the ticker runs: now is fresh
	used    atomic.Bool  // read since the last tick
	mu      sync.Mutex   // starts and stops the ticker
)

// Now returns the time since an arbitrary origin, shared by the process,
// at most about one Tick behind the precise clock.
func Now() time.Duration {
	if running.Load() {
		if !used.Load() {
			used.Store(true)
		}
		return time.Duration(now.Load())
	}
	return start()
}

// Precise returns the precise time on Now's scale.
func Precise() time.Duration { return time.Since(base) }

// start reads the precise clock and starts the ticker unless it runs.
func start() time.Duration {
	mu.Lock()
	defer mu.Unlock()
	t := time.Since(base)
	if running.Load() {
		return time.Duration(now.Load())
	}
	now.Store(int64(t)) // before running: whoever sees running sees a fresh now
	used.Store(true)
	running.Store(true)
	go tick()
	return t
}

func tick() {
	t := time.NewTicker(Tick)
	defer t.Stop()
	unread := 0
	for range t.C {
		now.Store(int64(time.Since(base)))
		if used.Load() {
			used.Store(false)
			unread = 0
			continue
		}
		if unread++; time.Duration(unread)*Tick >= Idle {
			mu.Lock()
			if !used.Load() {
				running.Store(false)
				mu.Unlock()
				return
			}
			mu.Unlock()
			unread = 0
		}
	}
}
