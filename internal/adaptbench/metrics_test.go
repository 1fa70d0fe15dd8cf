package adaptbench

import (
	"math"
	"testing"
	"time"
)

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3, 3, 3, 3}, 1},
		{[]float64{4, 0, 0, 0}, 0.25},
		{[]float64{1, 2}, 0.9},
	} {
		if got := Jain(tc.xs); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	if !math.IsNaN(Jain([]float64{0, 0})) {
		t.Error("Jain of zeros is not NaN")
	}
}

func TestPercentile(t *testing.T) {
	xs := make([]int64, 100)
	for i := range xs {
		xs[i] = int64(100-i) * 1000 // 100 ms … 1 ms, unsorted
	}
	if p := percentile(xs, 0.5); p != 50*time.Millisecond {
		t.Errorf("p50 = %v", p)
	}
	if p := percentile(xs, 0.99); p != 99*time.Millisecond {
		t.Errorf("p99 = %v", p)
	}
	if p := percentile(nil, 0.99); p != 0 {
		t.Errorf("p99 of nothing = %v", p)
	}
}

// TestAnalyze checks the measures on made-up records: two phases of 4 s,
// C 10 then 5, S 100 ms (C/S = 100/s then 50/s); completions at exactly the
// capacity in the first, nothing for 600 ms after the step and then 40/s in
// the second (0.8 of C/S), fair between the light tenants in the second.
func TestAnalyze(t *testing.T) {
	cfg := &Config{
		Capacity: 10, Service: 100 * time.Millisecond, SLO: 250 * time.Millisecond, Tenants: 4,
		Phases: []Phase{
			{Name: "a", Duration: 4 * time.Second, Load: 1, Capacity: 10},
			{Name: "b", Duration: 4 * time.Second, Load: 2, Capacity: 5, Backlogged: true},
		},
	}
	lat := int64(100_000) // µs
	rd := &runData{phaseMax: []int{10, 5}, lims: [][]LimitSample{{{Index: 0, Limit: 8}, {Index: 40, Limit: 4}}, {{Index: 0, Limit: 2}}}}
	add := func(from, to time.Duration, every time.Duration, kind int, l int64) {
		i := 0
		for at := from; at < to; at += every {
			rd.recs = append(rd.recs, Record{At: at.Microseconds(), Tenant: i % 4, Kind: kind, Latency: l})
			i++
		}
	}
	add(0, 3900*time.Millisecond, 10*time.Millisecond, kindOK, lat)                        // 100/s done by 4 s
	add(4500*time.Millisecond, 7900*time.Millisecond, 25*time.Millisecond, kindOK, lat)    // 40/s from 4.6 s
	add(4000*time.Millisecond, 8000*time.Millisecond, 20*time.Millisecond, kindRefused, 0) // refusals in b
	add(4000*time.Millisecond, 4100*time.Millisecond, 10*time.Millisecond, kindError, 5000)
	// slow ones in a's first 2 s (the settle budget), none after
	add(50*time.Millisecond, 650*time.Millisecond, 100*time.Millisecond, kindOK, 3*lat)
	res := Analyze(cfg, "x", []*runData{rd})

	near := func(what string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %v, want %v ± %v", what, got, want, tol)
		}
	}
	// a: 390 good in 4 s at 100/s; b: 136 good in 4 s at 50/s.
	near("goodput a", res.Phases[0].Goodput, 390.0/400, 0.01)
	near("goodput b", res.Phases[1].Goodput, 136.0/200, 0.01)
	near("goodput", res.Goodput, (390.0+136)/600, 0.01)
	// 6 slow of 532 served, all in a's first 2 s
	if res.P50 != 100*time.Millisecond || res.P99 != 300*time.Millisecond {
		t.Errorf("p50 %v p99 %v", res.P50, res.P99)
	}
	if p := res.Phases[0]; p.P99 != 300*time.Millisecond || p.P99Settled != 100*time.Millisecond {
		t.Errorf("a: p99 %v, after 2 s %v; want 300ms and 100ms", p.P99, p.P99Settled)
	}
	near("refused b", res.Phases[1].RefusedRate, 200.0/(136+200+10), 0.001)
	near("errors b", res.Phases[1].ErrorRate, 10.0/(136+200+10), 0.001)
	// The first completion in b is at 4.6 s: the first 250 ms window in
	// the band starts there (±1 step).
	if len(res.Settle) != 1 || res.Settle[0] < 550*time.Millisecond || res.Settle[0] > 650*time.Millisecond {
		t.Errorf("settle = %v, want ≈600ms", res.Settle)
	}
	near("Jain", res.Jain, 1, 0.01)
	near("flood share", res.FloodShare, 0.25, 0.01)
	if res.Peak != 10 {
		t.Errorf("peak %d", res.Peak)
	}
	// Limits: process 0 at 8 then 4 from 4 s, process 1 at 2: 10 then 6.
	near("mean limit a", res.Phases[0].MeanLimit, 10, 1e-9)
	near("mean limit b", res.Phases[1].MeanLimit, 6, 1e-9)
}
