// Package testkit holds what keycap's tests share that needs nothing but the
// standard library, so that the core module's tests can use it: bounded waits
// and a leak check (Recv, Group, Gate, VerifyNoLeaks), same-run benchmark
// rounds (Alternate), a concurrency counter, helper processes, a throttling
// vendor. (internal/testenv, a module of its own, finds the services.)
//
// Its waits bound the waits of keycap's tests, so that a failing
// test fails in seconds instead of hanging the suite: every receive a test
// makes goes through Recv, with a limit and a name for what it waits for.
// Standard library only, for the core module's tests.
package testkit

import (
	"fmt"
	"os"
	"runtime"
	"strings"
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

// VerifyNoLeaks runs the tests of m and then fails the run if goroutines
// started by keycap's own code (any stack frame under the module path, this
// package's aside) are still running 5 s after the last test: a goroutine
// that outlives the value that started it. Use it as TestMain:
//
//	func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }
func VerifyNoLeaks(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaks := waitLeaks(5 * time.Second); len(leaks) > 0 {
			fmt.Fprintf(os.Stderr, "testkit: %d goroutines of keycap's code outlived the tests:\n\n%s\n", len(leaks), strings.Join(leaks, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// waitLeaks returns the stacks of keycap's goroutines still running after
// up to d.
func waitLeaks(d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		leaks := ownGoroutines()
		if len(leaks) == 0 || time.Now().After(deadline) {
			return leaks
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ownGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var own []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/testkit.") {
			continue // this check, and the main goroutine running it
		}
		if strings.Contains(g, "github.com/keycap/keycap") && !strings.Contains(g, "_test.") {
			own = append(own, g)
		}
	}
	return own
}

// WaitUntil polls cond every 5 ms until it holds, or fails t within d naming
// what it waited for: for a state that gives no signal to wait on (a key in
// a store, a count in another process).
func WaitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
