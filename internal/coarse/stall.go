package coarse

import (
	"cmp"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A stall is a time when the process did not run what was ready to run:
// its threads got no CPU (a machine loaded beyond its cores, a container
// whose CPU quota ran out), or it had more goroutines ready than Ps
// (GOMAXPROCS) to run them. Once Watch is called, the ticker notes three
// signs of it, while it ticks, each a delay that a ready goroutine met:
//
//   - a gap: its own tick came late, from when it was due to when it ran.
//     A woken goroutine goes first, so the process ran little or nothing
//     else of its own meanwhile.
//   - a probe's wait: every few ticks (probeEvery), the ticker wakes a
//     probe, a goroutine that yields (runtime.Gosched) and times how long
//     it waits to run again, at the back of the global run queue — where
//     the goroutines woken by the network poller wait when the Ps are
//     busy (a reply read late), and where the process's own busy
//     goroutines go when preempted. A probe still out is a wait from when
//     it yielded.
//   - a goroutine's wait, as the runtime counts them (runtime/metrics
//     /sched/latencies:seconds, a sample of them), read as often as the
//     probe is woken: the longest wait among those that started to run
//     since the last read, back from this one.
//
// What a stall costs a call depends on its length more than on how much
// of the time such stalls cover: a busy process makes every goroutine
// wait a few milliseconds (the scheduler's time slice is 10 ms), all the
// time, which costs a call those milliseconds at each of its steps. So
// Stalled counts the time covered by stalls from a length the caller
// gives. Only stalls of at least StallMin are noted; the last ones, merged
// where they overlap, are kept for Stalled.
const StallMin = 5 * time.Millisecond

// span is a time on Now's scale, from start to end, in which the longest
// stall was longest.
type span struct{ start, end, longest time.Duration }

// spans keeps the last stalls, a ring whose latest is at n-1.
type spans struct {
	ring [128]span
	n    int
}

// note records s, merged with the last span when they overlap and the
// merged span stays little longer than its longest stall (mergeSlack), so
// that a span still says where its stall was: a long starvation is many
// spans, not one that would lend its worst moment to all of it.
func (r *spans) note(s span) {
	if r.n > 0 {
		last := &r.ring[(r.n-1)%len(r.ring)]
		m := span{min(last.start, s.start), max(last.end, s.end), max(last.longest, s.longest)}
		if s.start <= last.end && m.end-m.start <= m.longest+mergeSlack {
			*last = m
			return
		}
	}
	r.ring[r.n%len(r.ring)] = s
	r.n++
}

const mergeSlack = 16 * time.Millisecond

// within appends the spans of stalls of at least least that overlap
// from–to, cut to it, to out.
func (r *spans) within(from, to, least time.Duration, out []span) []span {
	for i := max(r.n-len(r.ring), 0); i < r.n; i++ {
		if s := r.ring[i%len(r.ring)]; s.longest >= least && s.end > from && s.start < to {
			s.start, s.end = max(s.start, from), min(s.end, to)
			out = append(out, s)
		}
	}
	return out
}

var (
	watching atomic.Bool

	stallMu sync.Mutex
	stalls  spans

	probeAt atomic.Int64 // when the probe out yielded, on Now's scale; 0: none out
	rounds  atomic.Int64 // the probe's rounds, for BenchmarkWatchTick
)

// probeEvery is how many ticks apart the watch wakes the probe and reads the
// runtime's metrics: often enough for stalls of a few milliseconds, at a
// quarter of the cost.
const probeEvery = 4

// Watch starts noting stalls (Stalled), from the next tick on. It costs,
// every probeEvery ticks while the clock ticks, a read of the runtime's
// metrics and a probe's yield (BenchmarkWatchTick).
func Watch() { watching.Store(true) }

// watcher is the ticker's part of the watch: its probe, started with the
// ticker (or at its first tick watched, when Watch comes later) and
// stopped with it, and what the runtime's metrics said at its last read.
type watcher struct {
	ticks  int
	poke   chan struct{} // wakes the probe; nil until it runs
	sample []metrics.Sample
	seen   []uint64 // the runtime's counts of goroutine waits, as of the last read
}

// tick notes the stalls seen at the tick cur, the previous one being at
// prev.
func (w *watcher) tick(prev, cur time.Duration) {
	if due := prev + Tick; cur-due >= StallMin {
		noteStall(span{due, cur, cur - due})
	}
	if w.ticks++; w.ticks%probeEvery != 0 {
		return
	}
	if w.poke == nil { // Watch was called after the ticker started
		w.start()
	}
	select {
	case w.poke <- struct{}{}:
	default: // a round is due already
	}
	metrics.Read(w.sample)
	if w.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return // not in this runtime
	}
	h := w.sample[0].Value.Float64Histogram()
	if len(w.seen) != len(h.Counts) { // the first read: nothing to compare with
		w.seen = slices.Clone(h.Counts)
		return
	}
	longest := 0.0
	for i := len(h.Counts) - 1; i >= 0; i-- {
		if h.Counts[i] != w.seen[i] {
			longest = h.Buckets[i] // the bucket's lower bound: a wait at least this long
			break
		}
	}
	copy(w.seen, h.Counts)
	if longest <= 0 || math.IsInf(longest, 0) {
		return
	}
	if d := time.Duration(longest * float64(time.Second)); d >= StallMin {
		noteStall(span{cur - d, cur, d})
	}
}

// start starts the probe.
func (w *watcher) start() {
	w.poke = make(chan struct{}, 1)
	go probe(w.poke)
	w.sample = []metrics.Sample{{Name: "/sched/latencies:seconds"}}
}

// stop ends the probe.
func (w *watcher) stop() {
	if w.poke != nil {
		close(w.poke)
	}
}

// probe times, at each poke, how long a goroutine that yields waits to run
// again, until poke is closed.
func probe(poke <-chan struct{}) {
	for range poke {
		start := Precise()
		probeAt.Store(int64(start))
		runtime.Gosched()
		end := Precise()
		probeAt.Store(0)
		if end-start >= StallMin {
			noteStall(span{start, end, end - start})
		}
		rounds.Add(1)
	}
}

func noteStall(s span) {
	stallMu.Lock()
	stalls.note(s)
	stallMu.Unlock()
}

// Stalled returns how much of the time from from to to, on Now's scale
// (Precise's), the process was stalled, as far as the ticker saw: the
// time covered by its stalls of at least least, with those under way (a
// tick overdue, a probe out). While the ticker does not tick (nobody read
// the clock for Idle), or before Watch, it sees nothing, and what it saw
// longest ago may be forgotten: Stalled never says more than it saw.
func Stalled(from, to, least time.Duration) time.Duration {
	least = max(least, StallMin)
	mu.Lock()
	ticking := running
	mu.Unlock()
	var buf [len(stalls.ring) + 2]span
	stallMu.Lock()
	all := stalls.within(from, to, least, buf[:0])
	stallMu.Unlock()
	// The stalls under way, noted only once they end.
	end := min(to, Precise())
	if due := time.Duration(now.Load()) + Tick; ticking && end-due >= least && end > from {
		all = append(all, span{max(due, from), end, end - due})
	}
	if p := time.Duration(probeAt.Load()); p != 0 && end-p >= least && end > from {
		all = append(all, span{max(p, from), end, end - p})
	}
	slices.SortFunc(all, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	var sum time.Duration
	reach := from
	for _, s := range all {
		if s.end > reach {
			sum += s.end - max(s.start, reach)
			reach = s.end
		}
	}
	return sum
}
