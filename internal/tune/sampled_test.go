package tune

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// sampled is the processor-sharing backend of backend, with each job's
// service time drawn uniform in s ± 25 % and a fixed overhead added (a
// round trip), as internal/adaptbench's: an interval's mean latency is
// as noisy as a real one of that many samples.
func sampled(rng *rand.Rand, c int, s, overhead time.Duration, demand, v int) Report {
	inflight := min(demand, v)
	if inflight == 0 {
		return Report{}
	}
	slow := max(1, float64(inflight)/float64(c))
	done := int64(float64(inflight) * float64(interval) / (float64(s)*slow + float64(overhead)))
	var r Report
	for range done {
		d := time.Duration(float64(s)*(0.75+0.5*rng.Float64())*slow) + overhead
		r.sample(d)
	}
	r.Load = time.Duration(inflight) * interval
	return r
}

// sample adds one completed piece of work of duration d to r.
func (r *Report) sample(d time.Duration) {
	r.Done++
	r.Latency += d
	us := int64(d / time.Microsecond)
	r.Squares += us * us
}

// TestHoldsTheCapacityThroughSampledNoise: against a backend whose
// interval means carry the noise of their samples (40 ms ± 25 %, 1 ms of
// round trip, reports an interval late, 4× demand), a total holds at the
// capacity: the mean total within [0.95, 1.1] of it, and at most a tenth
// of the intervals below 90 % of it or above 120 %. The law before the
// standard error (67f1103) read a total at its no-load latency as
// queueing one interval in five here: at a capacity of 5 the total
// ratcheted down to a mean of 1.15, and at 10 it spent 156 of 760
// intervals at 8.
func TestHoldsTheCapacityThroughSampledNoise(t *testing.T) {
	c := Config{Floor: 1, Ceiling: 400, Tolerance: 1.1}
	for _, capacity := range []int{5, 10, 20, 40} {
		rng := rand.New(rand.NewPCG(uint64(capacity), 1))
		st := State{Value: 2 * capacity}
		var late Report
		var sum, under, over int
		const settle, n = 40, 800
		for i := range n {
			r := sampled(rng, capacity, 40*time.Millisecond, time.Millisecond, 4*capacity, st.Value)
			st, late = Next(c, st, interval, []Report{late}), r
			if i >= settle {
				sum += st.Value
				if float64(st.Value) < 0.9*float64(capacity) {
					under++
				}
				if float64(st.Value) > 1.2*float64(capacity) {
					over++
				}
			}
		}
		mean := float64(sum) / (n - settle)
		t.Logf("C %d: mean total %.2f (%.3f C); below 0.9 C %d, above 1.2 C %d of %d intervals", capacity, mean, mean/float64(capacity), under, over, n-settle)
		if mean < 0.95*float64(capacity) || mean > 1.1*float64(capacity) || under > (n-settle)/10 || over > (n-settle)/10 {
			t.Errorf("C %d: mean total %.2f, %d intervals below 0.9 C and %d above 1.2 C: want within [0.95, 1.1] C and at most a tenth of the intervals outside",
				capacity, mean, under, over)
		}
	}
}

// TestSquaresSaturate: a sum of squares too large for a Report (work
// held for hours) saturates, in the process and in the merge, and then
// says nothing of the noise; a sum that fits gives the standard error.
func TestSquaresSaturate(t *testing.T) {
	if got := Squares(1e30); got != math.MaxInt64 {
		t.Fatalf("Squares(1e30) = %d", got)
	}
	r := Report{Done: 4, Latency: 4 * time.Hour, Squares: math.MaxInt64 - 1}
	r.Add(Report{Done: 4, Latency: 4 * time.Hour, Squares: 2})
	if r.Squares != math.MaxInt64 || r.stderr() != 0 {
		t.Fatalf("merged: squares %d, stderr %v; want saturated, 0", r.Squares, r.stderr())
	}
	// 10 ms and 30 ms: mean 20 ms, deviation 10 ms, standard error 10/√2 ms
	var ok Report
	ok.sample(10 * time.Millisecond)
	ok.sample(30 * time.Millisecond)
	if se := ok.stderr(); math.Abs(se-float64(10*time.Millisecond)/math.Sqrt2) > 1e3 {
		t.Fatalf("stderr %v ns, want %v", se, float64(10*time.Millisecond)/math.Sqrt2)
	}
}

// TestRaisesALowEstimate: a latency cut in a surge estimated the capacity
// low (14 of 20); probes above the estimate that meet no queueing raise
// it a slot every two intervals, so the total is back at 19 or more within
// 16 intervals (4 s at 250 ms), where a probe every 8 intervals took 48.
func TestRaisesALowEstimate(t *testing.T) {
	c := Config{Floor: 1, Ceiling: 400, Tolerance: 1.1}
	rng := rand.New(rand.NewPCG(7, 1))
	st := State{Value: 14, Baseline: 41 * time.Millisecond, Overloaded: 15, Calm: 3, Estimated: true}
	var late Report
	for i := range 16 {
		r := sampled(rng, 20, 40*time.Millisecond, time.Millisecond, 80, st.Value)
		st, late = Next(c, st, interval, []Report{late}), r
		if st.Value >= 19 {
			t.Logf("at %d after %d intervals", st.Value, i+1)
			return
		}
	}
	t.Fatalf("total %d after 16 intervals (%s), want 19 or more", st.Value, st.Reason)
}

// TestEarly: a process's own last completions cut what it enforces when
// they are past the tolerance, noise and all, once a no-load latency is
// known and not right after a cut.
func TestEarly(t *testing.T) {
	c := Config{Floor: 1, Ceiling: 100, Tolerance: 1.1}
	known := State{Value: 40, Baseline: 40 * time.Millisecond}
	window := func(n int, d, spread time.Duration) Report {
		var r Report
		for i := range n {
			r.sample(d + time.Duration(2*(i%2)-1)*spread) // d ± spread
		}
		return r
	}
	for _, tc := range []struct {
		what   string
		s      State
		window Report
		want   float64 // 0: no cut
	}{
		{"twice the no-load latency", known, window(16, 80*time.Millisecond, 10*time.Millisecond), 0.5},
		{"1.3 ×", known, window(16, 52*time.Millisecond, time.Millisecond), 0.9 / 1.3},
		{"1.15 ×, but noise of ±25 %", known, window(16, 46*time.Millisecond, 10*time.Millisecond), 0},
		{"at the no-load latency", known, window(16, 40*time.Millisecond, time.Millisecond), 0},
		{"too few completions", known, window(EarlyWindow-1, 80*time.Millisecond, 0), 0},
		{"no no-load latency yet", State{Value: 40}, window(16, 80*time.Millisecond, 0), 0},
		{"right after a cut", State{Value: 20, Baseline: 40 * time.Millisecond, Overloaded: 21, Calm: 1}, window(16, 80*time.Millisecond, 0), 0},
		{"two intervals after a cut", State{Value: 20, Baseline: 40 * time.Millisecond, Overloaded: 21, Calm: 2}, window(16, 80*time.Millisecond, 0), 0.5},
	} {
		f, ok := Early(c, tc.s, tc.window)
		if ok != (tc.want > 0) || math.Abs(f-tc.want) > 1e-3 {
			t.Errorf("%s: Early = %.3f, %v; want %.3f", tc.what, f, ok, tc.want)
		}
	}
}
