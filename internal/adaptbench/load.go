package adaptbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Phase is a stretch of the schedule: an offered load, and the backend's
// capacity while it lasts.
type Phase struct {
	Name     string
	Duration time.Duration
	// Load is the open-loop arrival rate, in multiples of the initial
	// capacity's throughput C0/S.
	Load float64
	// Capacity is the backend's true capacity C during the phase.
	Capacity int
	// Backlogged says that every tenant offers more than its fair share of
	// the capacity during the phase: fairness is measured there.
	Backlogged bool
}

// Schedule returns the phases for an initial capacity c0, each of 8 s ×
// scale (rounded to 100 ms, at least 500 ms):
//
//	0.5×        C0    warm-up, below capacity
//	4×          C0    overload: 4× what the backend can serve
//	4×, C÷2     C0/2  the backend loses half its capacity (8× its throughput)
//	1×, C÷2     C0/2  the load falls back to C0/S (2× the halved throughput)
//
// Loads are multiples of C0/S, the initial throughput; goodput is measured
// against the capacity in force.
func Schedule(c0 int, scale float64) []Phase {
	d := max(time.Duration(float64(8*time.Second)*scale).Round(100*time.Millisecond), 500*time.Millisecond)
	half := max(c0/2, 1)
	return []Phase{
		{Name: "0.5×", Duration: d, Load: 0.5, Capacity: c0},
		{Name: "4×", Duration: d, Load: 4, Capacity: c0, Backlogged: true},
		{Name: "4×,C÷2", Duration: d, Load: 4, Capacity: half, Backlogged: true},
		{Name: "1×,C÷2", Duration: d, Load: 1, Capacity: half},
	}
}

// Total returns the length of a schedule.
func Total(phases []Phase) time.Duration {
	var t time.Duration
	for _, p := range phases {
		t += p.Duration
	}
	return t
}

// phaseAt returns the index of the phase at offset t, or -1 past the end.
func phaseAt(phases []Phase, t time.Duration) int {
	var end time.Duration
	for i, p := range phases {
		end += p.Duration
		if t < end {
			return i
		}
	}
	return -1
}

// phaseStart returns when phase i begins.
func phaseStart(phases []Phase, i int) time.Duration {
	var start time.Duration
	for _, p := range phases[:i] {
		start += p.Duration
	}
	return start
}

// Tenant names tenant i; tenant 0 floods.
func Tenant(i int) string { return fmt.Sprintf("t%02d", i) }

// arrivals calls fire at the arrival times of one process's share of the
// offered load — a Poisson process of rate Load×C0/S ÷ processes, that
// changes rate with the phase — from base until the schedule ends or ctx is
// done. Each arrival names its tenant: tenant 0 with probability flood, else
// one of the others at random.
func arrivals(ctx context.Context, cfg *WorkerConfig, base time.Time, fire func(at time.Time, tenant int)) {
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Process)+1))
	unit := float64(cfg.Capacity) / cfg.Service.Seconds() / float64(cfg.Processes) // arrivals/s at 1×
	end := Total(cfg.Phases)
	var at time.Duration
	for {
		i := phaseAt(cfg.Phases, at)
		if i < 0 {
			return
		}
		rate := cfg.Phases[i].Load * unit
		if rate <= 0 { // skip to the next phase
			at = phaseEnd(cfg.Phases, i)
			continue
		}
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= end {
			return
		}
		// An arrival drawn past the phase's end would be drawn at the wrong
		// rate; the memoryless process restarts at the boundary instead.
		if e := phaseEnd(cfg.Phases, i); at >= e {
			at = e
			continue
		}
		tenant := 0
		if rng.Float64() >= cfg.Flood {
			tenant = 1 + rng.IntN(cfg.Tenants-1)
		}
		if d := time.Until(base.Add(at)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		fire(base.Add(at), tenant)
	}
}

func phaseEnd(phases []Phase, i int) time.Duration {
	var end time.Duration
	for _, p := range phases[:i+1] {
		end += p.Duration
	}
	return end
}
