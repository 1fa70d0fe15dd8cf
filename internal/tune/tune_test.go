package tune

import (
	"encoding/binary"
	"math"
	"testing"
	"time"
)

var cfg = Config{Floor: 2, Ceiling: 400, Tolerance: 1.25}

const interval = 250 * time.Millisecond

// backend is a processor-sharing backend of capacity c and no-load
// latency s, offered demand concurrent callers: what one interval under
// total v reports.
func backend(c int, s time.Duration, demand, v int) Report {
	inflight := min(demand, v)
	if inflight == 0 {
		return Report{}
	}
	mean := time.Duration(float64(s) * max(1, float64(inflight)/float64(c)))
	done := int64(float64(inflight) * float64(interval) / float64(mean))
	return Report{Done: done, Latency: mean * time.Duration(done), Load: time.Duration(inflight) * interval}
}

// run steps the law n intervals against the backend, from st, and returns
// the states.
func run(st State, n, c, demand int) []State {
	out := make([]State, n)
	for i := range out {
		// three processes, each a third of the load
		r := backend(c, 20*time.Millisecond, demand, st.Value)
		third := Report{Done: r.Done / 3, Latency: r.Latency / 3, Load: r.Load / 3}
		st = Next(cfg, st, interval, []Report{third, third, third})
		out[i] = st
	}
	return out
}

func TestFindsTheCapacity(t *testing.T) {
	const c = 40
	// From a start at or below twice the capacity: a start far above it,
	// under overload from the first interval, never sees the no-load
	// latency (the package comment says so).
	for _, start := range []int{2, 20, 40, 80} {
		states := run(State{Value: start}, 80, c, 4*c)
		// Settled by 40 intervals (10 s at 250 ms), then within
		// [0.85 C, 1.5 C]: a cut goes below the capacity, to see the no-load
		// latency again.
		for i, s := range states[40:] {
			if s.Value < c*85/100 || s.Value > c*3/2 {
				t.Fatalf("from %d: interval %d: total %d (%s), want within [%d, %d]", start, 40+i, s.Value, s.Reason, c*85/100, c*3/2)
			}
		}
	}
}

func TestFollowsACapacityThatHalves(t *testing.T) {
	states := run(State{Value: 60}, 40, 40, 160)
	after := run(states[len(states)-1], 12, 20, 160)
	// within 8 intervals (2 s at 250 ms) of the drop, and from then on
	for i, s := range after[8:] {
		if s.Value < 17 || s.Value > 30 {
			t.Fatalf("interval %d after the drop: total %d (%s), want within [17, 30]", 8+i, s.Value, s.Reason)
		}
	}
}

func TestHoldsWithoutSamples(t *testing.T) {
	st := State{Value: 37, Baseline: 20 * time.Millisecond}
	for range 1000 {
		st = Next(cfg, st, interval, nil)
	}
	if st.Value != 37 || st.Reason != NoSample {
		t.Fatalf("after 1000 empty intervals: %+v, want 37 held", st)
	}
	// Demand well below the total: held too, neither up nor down.
	for range 1000 {
		st = Next(cfg, st, interval, []Report{backend(40, 20*time.Millisecond, 5, st.Value)})
	}
	if st.Value != 37 || st.Reason != Steady {
		t.Fatalf("after 1000 light intervals: %+v, want 37 held", st)
	}
}

func TestStepsAreBounded(t *testing.T) {
	// A backend 100× slower than its baseline: a cut, at most by half.
	st := State{Value: 100, Baseline: time.Millisecond}
	r := Report{Done: 10, Latency: 10 * 100 * time.Millisecond, Load: 100 * interval}
	if n := Next(cfg, st, interval, []Report{r}); n.Value != 50 || n.Reason != Latency {
		t.Fatalf("latency cut: %+v, want 50", n)
	}
	// Growth: a tenth, at least one.
	r = Report{Done: 100, Latency: 100 * time.Millisecond, Load: 100 * interval}
	if n := Next(cfg, st, interval, []Report{r}); n.Value != 110 || n.Reason != Grown {
		t.Fatalf("growth: %+v, want 110", n)
	}
	st.Value = 3
	r = Report{Done: 100, Latency: 100 * time.Millisecond, Load: 3 * interval}
	if n := Next(cfg, st, interval, []Report{r}); n.Value != 4 {
		t.Fatalf("growth from 3: %+v, want 4", n)
	}
	// Overload: 9/10, whatever the latency says.
	st.Value = 100
	r = Report{Done: 99, Overloads: 1, Latency: 99 * time.Millisecond, Load: 100 * interval}
	if n := Next(cfg, st, interval, []Report{r}); n.Value != 90 || n.Reason != Overload {
		t.Fatalf("overload: %+v, want 90", n)
	}
	// A cut is of one slot at least, however small the total.
	for v := 10; v > cfg.Floor; v-- {
		st := State{Value: v, Baseline: time.Millisecond}
		if n := Next(cfg, st, interval, []Report{{Overloads: 1}}); n.Value != v-1 {
			t.Fatalf("overload at %d: %+v, want %d", v, n, v-1)
		}
		r := Report{Done: 10, Latency: 10 * 2 * time.Millisecond, Load: time.Duration(v) * interval}
		if n := Next(cfg, st, interval, []Report{r}); n.Value >= v {
			t.Fatalf("latency at %d: %+v, want a cut", v, n)
		}
	}
	// Under 1 % overloads: not an overload.
	r = Report{Done: 200, Overloads: 1, Latency: 200 * time.Millisecond, Load: 100 * interval}
	if n := Next(cfg, st, interval, []Report{r}); n.Reason == Overload {
		t.Fatalf("0.5 %% overloads: %+v, want no cut", n)
	}
	// Bounds.
	st = State{Value: 2, Baseline: time.Millisecond}
	r = Report{Overloads: 5}
	if n := Next(cfg, st, interval, []Report{r}); n.Value != cfg.Floor {
		t.Fatalf("at the floor: %+v", n)
	}
	st = State{Value: 400, Baseline: time.Millisecond}
	r = Report{Done: 100, Latency: 100 * time.Millisecond, Load: 400 * interval}
	if n := Next(cfg, st, interval, []Report{r}); n.Value != cfg.Ceiling {
		t.Fatalf("at the ceiling: %+v", n)
	}
}

func TestBaselineRisesSlowly(t *testing.T) {
	st := State{Value: 10, Baseline: 10 * time.Millisecond}
	r := Report{Done: 10, Latency: 10 * 30 * time.Millisecond, Load: 5 * interval}
	for range 150 {
		st = Next(cfg, st, interval, []Report{r})
	}
	if st.Baseline != 30*time.Millisecond {
		t.Fatalf("after 150 intervals at 30ms: baseline %s, want 30ms", st.Baseline)
	}
	st = State{Value: 10, Baseline: 10 * time.Millisecond}
	st = Next(cfg, st, interval, []Report{r})
	if st.Baseline > 11*time.Millisecond {
		t.Fatalf("after one interval at 30ms: baseline %s, want at most 1 %% above 10ms", st.Baseline)
	}
}

func TestEncoding(t *testing.T) {
	r := Report{Done: 12345, Overloads: 3, Latency: 17 * time.Second, Load: -1, Squares: 1 << 40}
	if got, err := DecodeReport(r.Encode()); err != nil || got != r {
		t.Fatalf("report: %+v, %v", got, err)
	}
	s := State{Value: 77, Baseline: 20 * time.Millisecond, Reason: Latency, Mean: 31 * time.Millisecond, InFlight: 76.5, Done: 9, Overload: 1,
		Overloaded: 70, Calm: 3, Estimated: true}
	if got, err := DecodeState(s.Encode()); err != nil || got != s {
		t.Fatalf("state: %+v, %v", got, err)
	}
	// The versions before, as a process not yet upgraded writes them: a
	// report without Squares, a state without Estimated.
	old := []byte{reportVersion - 1}
	for _, v := range []int64{r.Done, r.Overloads, int64(r.Latency), int64(r.Load)} {
		old = binary.AppendVarint(old, v)
	}
	if got, err := DecodeReport(old); err != nil || got != (Report{Done: r.Done, Overloads: r.Overloads, Latency: r.Latency, Load: r.Load}) {
		t.Fatalf("report of the version before: %+v, %v", got, err)
	}
	old = []byte{stateVersion - 1}
	for _, v := range []int64{77, int64(20 * time.Millisecond), int64(Latency), int64(31 * time.Millisecond),
		int64(math.Float64bits(76.5)), 9, 1, 70, 3} {
		old = binary.AppendVarint(old, v)
	}
	if got, err := DecodeState(old); err != nil || got != (State{Value: 77, Baseline: 20 * time.Millisecond, Reason: Latency,
		Mean: 31 * time.Millisecond, InFlight: 76.5, Done: 9, Overload: 1, Overloaded: 70, Calm: 3}) {
		t.Fatalf("state of the version before: %+v, %v", got, err)
	}
	for _, b := range [][]byte{nil, {}, {9}, {reportVersion}, append(r.Encode(), 0)} {
		if _, err := DecodeReport(b); err == nil {
			t.Fatalf("%x decoded as a report", b)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Report{Done: 1}.Encode())
	f.Add(State{Value: 3}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeReport(b); err == nil {
			if got, err := DecodeReport(r.Encode()); err != nil || got != r {
				t.Fatalf("report %+v does not round-trip", r)
			}
		}
		if s, err := DecodeState(b); err == nil {
			if got, err := DecodeState(s.Encode()); err != nil || got.Value != s.Value {
				t.Fatalf("state %+v does not round-trip", s)
			}
		}
	})
}

// hardCap is a backend that answers overload to every call past cap in
// flight, at once, and takes s for the others: a vendor's hidden
// concurrency limit. It returns the report of one interval under v with
// demand callers, and the share of calls refused.
func hardCap(cap int, s time.Duration, demand, v int) Report {
	inflight := min(demand, v)
	ok := min(inflight, cap)
	done := int64(float64(ok) * float64(interval) / float64(s))
	// each caller past the cap is refused, and backs off for about a
	// call's length before it tries again
	over := int64(float64(inflight-ok) * float64(interval) / float64(s))
	return Report{Done: done, Overloads: over, Latency: s * time.Duration(done), Load: time.Duration(ok) * interval}
}

func TestFindsAHardLimitAndTouchesItRarely(t *testing.T) {
	const cap = 20
	st := State{Value: 4}
	var done, over int64
	for i := range 200 {
		r := hardCap(cap, 50*time.Millisecond, 80, st.Value)
		st = Next(cfg, st, interval, []Report{r})
		if i < 40 {
			continue // 10 s to converge
		}
		if st.Value < 18 || st.Value > 21 {
			t.Fatalf("interval %d: total %d (%s), want within [18, 21]", i, st.Value, st.Reason)
		}
		done += r.Done
		over += r.Overloads
	}
	if share := float64(over) / float64(done+over); share > 0.01 {
		t.Fatalf("%.2f %% of the calls met the limit after converging, want under 1 %%", 100*share)
	}
}

// TestInfiniteToleranceIgnoresLatency: with a tolerance of +Inf (what
// Adaptive.OverloadsOnly asks for) a latency that grows with the total
// does not cut it; demand grows it and an overload cuts it.
func TestInfiniteToleranceIgnoresLatency(t *testing.T) {
	c := Config{Floor: 1, Ceiling: 100, Tolerance: math.Inf(1)}
	st := State{Value: 10, Baseline: 20 * time.Millisecond}
	// 10 in flight, all the time, at 5× the no-load latency.
	slow := Report{Done: 25, Latency: 25 * 100 * time.Millisecond, Load: 10 * interval}
	if n := Next(c, st, interval, []Report{slow}); n.Reason != Grown || n.Value <= st.Value {
		t.Fatalf("a slow but full interval: %d (%s), want growth", n.Value, n.Reason)
	}
	if n := Next(cfg, st, interval, []Report{slow}); n.Reason != Latency {
		t.Fatalf("the same with a finite tolerance: %s, want a latency cut", n.Reason)
	}
	over := Report{Done: 10, Overloads: 5, Latency: 10 * 20 * time.Millisecond, Load: 10 * interval}
	if n := Next(c, st, interval, []Report{over}); n.Reason != Overload || n.Value >= st.Value {
		t.Fatalf("an overloaded interval: %d (%s), want a cut", n.Value, n.Reason)
	}
}

// TestHoldsNearTheCapacity: with the reports an interval late, as the
// store delivers them (each interval is decided from the one before), and
// latency noise of ±2 %, a full total stays near the capacity instead of
// sawing above and below it: what a request pays in queueing and what the
// backend loses in idle slots are both small.
func TestHoldsNearTheCapacity(t *testing.T) {
	c := Config{Floor: 1, Ceiling: 400, Tolerance: 1.1}
	for _, capacity := range []int{10, 20, 40, 100} {
		st := State{Value: 2 * capacity, Baseline: 20 * time.Millisecond}
		var late Report // the report of the interval before
		var sum, over, under int
		seed := uint32(capacity)
		const settle, n = 40, 400
		for i := range n {
			r := backend(capacity, 20*time.Millisecond, 4*capacity, st.Value)
			seed = seed*1664525 + 1013904223 // the latency's noise
			noise := 1 + 0.04*(float64(seed>>8)/float64(1<<24)-0.5)
			r.Latency = time.Duration(float64(r.Latency) * noise)
			st, late = Next(c, st, interval, []Report{late}), r
			if i >= settle {
				sum += st.Value
				if st.Value > capacity+capacity/10+1 {
					over++
				}
				if st.Value < capacity-capacity/10-1 {
					under++
				}
			}
		}
		mean := float64(sum) / (n - settle)
		t.Logf("C %d: mean total %.1f; above C+10 %% %d, below C-10 %% %d of %d intervals", capacity, mean, over, under, n-settle)
		if mean < 0.95*float64(capacity) || mean > 1.05*float64(capacity) || over+under > (n-settle)/10 {
			t.Errorf("C %d: mean total %.1f, %d intervals more than 10 %% above and %d below: want within 5 %% and 90 %% of intervals within 10 %%",
				capacity, mean, over, under)
		}
	}
}
