// Package testwait bounds the waits of keycap's tests, so that a failing
// test fails in seconds instead of hanging the suite: every receive a test
// makes goes through Recv, with a limit and a name for what it waits for.
// Standard library only, for the core module's tests.
package testwait

import (
	"sync"
	"testing"
	"time"
)

// Recv receives from ch within d, or fails t naming what it waited for.
func Recv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("waited %s for %s", d, what)
		var zero T
		return zero
	}
}

// Group is a sync.WaitGroup whose Wait is bounded.
type Group struct{ sync.WaitGroup }

// Wait waits for the group within d, or fails t naming what it waited for.
func (g *Group) Wait(t testing.TB, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		g.WaitGroup.Wait()
		close(done)
	}()
	Recv(t, done, d, what)
}

// Gate is a channel that a test closes to let blocked handlers go on, once:
// close it in a deferred cleanup as well as where the test opens it, so that
// a test that fails before never leaves a handler (and the server's Close
// waiting for it) blocked.
type Gate struct {
	ch   chan struct{}
	once sync.Once
}

// NewGate returns a closed-by-nobody-yet Gate.
func NewGate() *Gate { return &Gate{ch: make(chan struct{})} }

// Open lets everything waiting on the gate go on. It is idempotent.
func (g *Gate) Open() { g.once.Do(func() { close(g.ch) }) }

// Wait blocks until the gate opens or d passes, and reports whether it
// opened. A handler uses it with a d longer than any test, so that it
// returns in the end even if nobody opens the gate.
func (g *Gate) Wait(d time.Duration) bool {
	select {
	case <-g.ch:
		return true
	case <-time.After(d):
		return false
	}
}

// C returns the channel that closes when the gate opens.
func (g *Gate) C() <-chan struct{} { return g.ch }
