package coarse

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStalledCoversLongStalls: Stalled is the time covered by the stalls
// at least as long as asked, cut to the time asked about. Spans far ahead
// of the clock keep the ticker's own records out of it.
func TestStalledCoversLongStalls(t *testing.T) {
	at := 1000 * time.Hour
	ms := time.Millisecond
	stallMu.Lock()
	stalls.note(span{at + 10*ms, at + 30*ms, 20 * ms})
	stalls.note(span{at + 50*ms, at + 90*ms, 40 * ms})
	stalls.note(span{at + 120*ms, at + 145*ms, 25 * ms})
	stalls.note(span{at + 130*ms, at + 160*ms, 30 * ms}) // merged: at+120..160, longest 30
	stallMu.Unlock()
	for _, c := range []struct {
		from, to, least, want time.Duration
	}{
		{at, at + 200*ms, 0, 100 * ms},               // all: 20 + 40 + 40
		{at, at + 200*ms, 25 * ms, 80 * ms},          // the first is too short
		{at, at + 200*ms, 31 * ms, 40 * ms},          // only the second
		{at + 20*ms, at + 60*ms, 0, 20 * ms},         // cut to the time asked
		{at + 55*ms, at + 70*ms, 40 * ms, 15 * ms},   // part of one
		{at + 140*ms, at + 150*ms, 30 * ms, 10 * ms}, // the merged one
		{at + 200*ms, at + 300*ms, 0, 0},             // after
		{at - 100*ms, at, 0, 0},                      // before
		{at + 60*ms, at + 60*ms, 0, 0},               // no time
	} {
		if got := Stalled(c.from, c.to, c.least); got != c.want {
			t.Errorf("Stalled(at%+v, at%+v, %v) = %v, want %v", c.from-at, c.to-at, c.least, got, c.want)
		}
	}
}

// TestSpansKeepWhereTheirStallWas: overlapping waits merge only while the
// merged span stays close to its longest stall, so that a long starvation
// of short waits does not lend its worst one to all of it.
func TestSpansKeepWhereTheirStallWas(t *testing.T) {
	var r spans
	ms := time.Millisecond
	r.note(span{0, 300 * ms, 300 * ms}) // one long wait
	for end := 301 * ms; end < 2*time.Second; end += ms {
		r.note(span{end - 6*ms, end, 6 * ms}) // then a wait of 6 ms at every tick
	}
	if got := r.within(time.Second, 2*time.Second, 50*ms, nil); len(got) != 0 {
		t.Fatalf("a second after a 300 ms wait, the waits of 6 ms are kept as %+v", got)
	}
}

// TestWatchSeesGoroutinesKeptWaiting starves the process itself: one P,
// and goroutines that never block, so that every other goroutine waits for
// the scheduler to preempt them. Stalled must see it, within 10 s.
func TestWatchSeesGoroutinesKeptWaiting(t *testing.T) {
	Watch()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
			}
		})
	}
	start := Precise()
	deadline := time.Now().Add(10 * time.Second)
	for {
		Now() // keeps the ticker ticking
		if s := Stalled(start, Precise(), 20*time.Millisecond); s >= 20*time.Millisecond {
			t.Logf("stalled %v in %v", s, Precise()-start)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("8 goroutines that never block on one P for 10 s: Stalled says %v", Stalled(start, Precise(), 20*time.Millisecond))
		}
		runtime.Gosched()
	}
}

// BenchmarkWatchTick is what the watch adds to the ticker, per tick: a
// probeEvery-th of a read of the runtime's metrics and of a probe's round
// (waited for here, so that it counts).
func BenchmarkWatchTick(b *testing.B) {
	var w watcher
	defer w.stop()
	prev := Precise()
	want := rounds.Load()
	for b.Loop() {
		cur := Precise()
		w.tick(prev, cur)
		prev = cur
		if w.ticks%probeEvery == 0 {
			want++
			for rounds.Load() < want {
				runtime.Gosched()
			}
		}
	}
}
