package adaptbench

import (
	"math"
	"slices"
	"time"
)

// Measurement windows.
const (
	rollWindow = 250 * time.Millisecond // rolling goodput and p99
	rollStep   = 50 * time.Millisecond  // the rolling windows' step
	settleHold = time.Second            // how long they must stay in the band
	goodBand   = 0.15                   // goodput within ±15 % of steady…
	goodFloor  = 0.1                    // …or ±0.1 of C/S, whichever is wider
	p99Band    = 1.25                   // p99 ≤ max(SLO, 1.25 × steady p99)
	// settleBudget is how long a step may take to settle (issue 30's
	// aim): a phase's p99 after it is the one a strategy holds once
	// settled.
	settleBudget = 2 * time.Second
)

// Result is one strategy's measurements, over its rounds.
type Result struct {
	Strategy string
	Rounds   int
	// Goodput is good completions per second over the whole schedule,
	// divided by the throughput C/S of the capacity in force.
	Goodput float64
	// P50 and P99 are the latency (admission wait and backend call) of the
	// admitted requests the backend served.
	P50, P99 time.Duration
	// ErrorRate and RefusedRate are the shares of the offered requests
	// that the backend refused (or did not answer in time), and that the
	// strategy did not admit; FailedRate those whose admission failed (a
	// store error), also counted in RefusedRate.
	ErrorRate, RefusedRate, FailedRate float64
	// Settle is, per step (the start of each phase after the first), the
	// time until the rolling goodput and p99 stay in their band; -1 when
	// they never do within the phase.
	Settle []time.Duration
	// Jain is Jain's fairness index of the light tenants' good
	// completions during the backlogged phases; FloodShare is the flooding
	// tenant's share of all good completions then.
	Jain, FloodShare float64
	// Peak is the most jobs in service at the backend at once.
	Peak   int
	Phases []PhaseResult
	// Limit is the total limit every limitSampleInterval, in slots (nil: no
	// limit); Good the rolling goodput, as a multiple of C/S.
	Limit, Good []Point
}

// PhaseResult is one phase's measurements.
type PhaseResult struct {
	Phase
	Goodput  float64
	P50, P99 time.Duration
	// P99Settled is the p99 of the requests that arrived settleBudget
	// or more after the phase began (0: none did).
	P99Settled             time.Duration
	ErrorRate, RefusedRate float64
	Peak                   int
	// MeanLimit is the mean total limit (NaN: no limit).
	MeanLimit float64
}

// Point is a value at T seconds from the start.
type Point struct{ T, V float64 }

// Analyze computes a strategy's result from its runs, pooled: counts are
// divided by the number of runs, latencies pooled.
func Analyze(cfg *Config, name string, runs []*runData) Result {
	res := Result{Strategy: name, Rounds: len(runs)}
	n := float64(len(runs))
	if n == 0 {
		return res
	}
	phases := cfg.Phases
	total := Total(phases)
	slo := cfg.SLO.Microseconds()
	perSec := func(p Phase) float64 { return float64(p.Capacity) / cfg.Service.Seconds() } // C/S

	// Good completions and served latencies in rollStep buckets, by
	// completion time; counts and latencies per phase, by arrival.
	buckets := int(total/rollStep) + 1
	goodAt := make([]float64, buckets)
	latAt := make([][]int64, buckets)
	type counts struct{ offered, errors, refused, failed int }
	pc := make([]counts, len(phases))
	plat := make([][]int64, len(phases))
	settled := make([][]int64, len(phases)) // plat's, from settleBudget into the phase
	var all []int64
	perTenant := make([]float64, cfg.Tenants)
	var goodBacklogged float64
	for _, rd := range runs {
		for _, r := range rd.recs {
			at := time.Duration(r.At) * time.Microsecond
			if i := phaseAt(phases, at); i >= 0 {
				pc[i].offered++
				switch r.Kind {
				case kindOK:
					plat[i] = append(plat[i], r.Latency)
					if at-phaseStart(phases, i) >= settleBudget {
						settled[i] = append(settled[i], r.Latency)
					}
					all = append(all, r.Latency)
				case kindError:
					pc[i].errors++
				case kindRefused:
					pc[i].refused++
				case kindFailed:
					pc[i].refused++
					pc[i].failed++
				}
			}
			if r.Kind != kindOK {
				continue
			}
			end := at + time.Duration(r.Latency)*time.Microsecond
			if end >= total {
				continue
			}
			b := int(end / rollStep)
			latAt[b] = append(latAt[b], r.Latency)
			if r.Latency > slo {
				continue
			}
			goodAt[b]++
			if phases[phaseAt(phases, end)].Backlogged {
				perTenant[r.Tenant]++
				goodBacklogged++
			}
		}
	}
	// ratio is each bucket's goodput ÷ C/S, with the C in force then.
	ratio := make([]float64, buckets)
	for i := range goodAt {
		goodAt[i] /= n
		if p := phaseAt(phases, time.Duration(i)*rollStep); p >= 0 {
			ratio[i] = goodAt[i] / rollStep.Seconds() / perSec(phases[p])
		}
	}

	// Goodput, per phase and overall.
	var good, capacity float64
	start := time.Duration(0)
	for i, p := range phases {
		lo, hi := int(start/rollStep), int((start+p.Duration)/rollStep)
		g := sum(goodAt[lo:hi])
		good += g
		capacity += perSec(p) * p.Duration.Seconds()
		pr := PhaseResult{Phase: p, Goodput: g / p.Duration.Seconds() / perSec(p), MeanLimit: math.NaN()}
		pr.P50, pr.P99 = percentile(plat[i], 0.5), percentile(plat[i], 0.99)
		pr.P99Settled = percentile(settled[i], 0.99)
		if pc[i].offered > 0 {
			pr.ErrorRate = float64(pc[i].errors) / float64(pc[i].offered)
			pr.RefusedRate = float64(pc[i].refused) / float64(pc[i].offered)
		}
		for _, rd := range runs {
			if i < len(rd.phaseMax) {
				pr.Peak = max(pr.Peak, rd.phaseMax[i])
			}
		}
		res.Peak = max(res.Peak, pr.Peak)
		res.Phases = append(res.Phases, pr)
		start += p.Duration
	}
	res.Goodput = good / capacity
	res.P50, res.P99 = percentile(all, 0.5), percentile(all, 0.99)
	var c counts
	for _, x := range pc {
		c.offered, c.errors, c.refused, c.failed = c.offered+x.offered, c.errors+x.errors, c.refused+x.refused, c.failed+x.failed
	}
	if c.offered > 0 {
		res.ErrorRate = float64(c.errors) / float64(c.offered)
		res.RefusedRate = float64(c.refused) / float64(c.offered)
		res.FailedRate = float64(c.failed) / float64(c.offered)
	}

	// Fairness in the backlogged phases.
	res.Jain = Jain(perTenant[1:])
	res.FloodShare = math.NaN()
	if goodBacklogged > 0 {
		res.FloodShare = perTenant[0] / goodBacklogged
	}

	// Rolling windows: goodput ratio and p99 of the rollWindow ending at
	// each bucket boundary.
	k := int(rollWindow / rollStep)
	roll := func(end int) (g float64, p99 time.Duration, ok bool) {
		if end < k || end > buckets {
			return 0, 0, false
		}
		var lat []int64
		for _, l := range latAt[end-k : end] {
			lat = append(lat, l...)
		}
		return sum(ratio[end-k:end]) / float64(k), percentile(lat, 0.99), true
	}
	for end := k; end < buckets; end += int(limitSampleInterval / rollStep) {
		if g, _, ok := roll(end); ok {
			res.Good = append(res.Good, Point{(time.Duration(end) * rollStep).Seconds(), g})
		}
	}

	// Settling after each step.
	start = phases[0].Duration
	for _, p := range phases[1:] {
		lo, hi := int(start/rollStep), int((start+p.Duration)/rollStep)
		q := max((hi-lo)/4, k)
		ssGood := sum(ratio[hi-q:hi]) / float64(q)
		var ssLat []int64
		for _, l := range latAt[hi-q : hi] {
			ssLat = append(ssLat, l...)
		}
		ssP99 := percentile(ssLat, 0.99)
		in := func(end int) bool {
			g, p99, _ := roll(end)
			band := max(goodBand*ssGood, goodFloor)
			return math.Abs(g-ssGood) <= band && p99 <= max(cfg.SLO, time.Duration(p99Band*float64(ssP99)))
		}
		hold := int(settleHold / rollStep)
		settle := time.Duration(-1)
		for first := lo + k; first+hold <= hi; first++ {
			ok := true
			for e := first; e <= first+hold; e++ {
				if !in(e) {
					ok = false
					break
				}
			}
			if ok {
				settle = time.Duration(first-k-lo) * rollStep
				break
			}
		}
		res.Settle = append(res.Settle, settle)
		start += p.Duration
	}

	res.Limit = trajectory(runs, total)
	if res.Limit != nil {
		start = 0
		for i, p := range phases {
			var s, m float64
			for _, pt := range res.Limit {
				if t := time.Duration(pt.T * float64(time.Second)); t >= start && t < start+p.Duration {
					s, m = s+pt.V, m+1
				}
			}
			if m > 0 {
				res.Phases[i].MeanLimit = s / m
			}
			start += p.Duration
		}
	}
	return res
}

// trajectory returns the total limit at each sample, averaged over runs: the
// sum of the processes' own limits, or the largest of their shared totals.
// nil when no process had a limit.
func trajectory(runs []*runData, total time.Duration) []Point {
	samples := int((total + limitSampleInterval - 1) / limitSampleInterval)
	sums := make([]float64, samples)
	limited := false
	for _, rd := range runs {
		for _, ls := range rd.lims {
			slices.SortFunc(ls, func(a, b LimitSample) int { return a.Index - b.Index })
		}
		for i := range samples {
			var own, shared float64
			for _, ls := range rd.lims {
				// the process's last sample at or before i
				j, found := slices.BinarySearchFunc(ls, i, func(s LimitSample, i int) int { return s.Index - i })
				if !found {
					j--
				}
				if j < 0 {
					continue
				}
				if ls[j].Limit > 0 {
					limited = true
				}
				if ls[j].Shared {
					shared = max(shared, float64(ls[j].Limit))
				} else {
					own += float64(ls[j].Limit)
				}
			}
			sums[i] += own + shared
		}
	}
	if !limited {
		return nil
	}
	pts := make([]Point, samples)
	for i := range pts {
		pts[i] = Point{(time.Duration(i) * limitSampleInterval).Seconds(), sums[i] / float64(len(runs))}
	}
	return pts
}

// Jain returns Jain's fairness index of xs, (Σx)² ÷ (n Σx²): 1 when all are
// equal, 1/n when one has everything; NaN when all are 0.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s, s2 = s+x, s2+x*x
	}
	if s2 == 0 {
		return math.NaN()
	}
	return s * s / (float64(len(xs)) * s2)
}

// percentile returns the q-quantile (nearest rank) of latencies in µs; 0
// when there are none. It sorts xs.
func percentile(xs []int64, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return time.Duration(xs[max(i, 0)]) * time.Microsecond
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}
