// Package tune is the control law of an adaptive total (keycap.Adaptive):
// from what the work a parent guards reported over one interval, on every
// process, it moves the parent's total between a floor and a ceiling.
//
// The law reads three signals, in this order:
//
//  1. Overload: when at least 1 % of the work that ended (and at least one
//     piece) ended with an overload signal (a timeout, a 429, 503 or 529,
//     RESOURCE_EXHAUSTED, an error the caller classified), the total is
//     cut to 9/10 — multiplicative decrease, as TCP and AIMD limiters do.
//  2. Latency: when the mean latency of the work that completed, less
//     twice its standard error, is above Tolerance × the no-load latency
//     — or above half of that tolerance (1.05 × for a tolerance of 1.1)
//     while the work in flight fills the total, a total a slot or two
//     past the capacity — the backend is queueing. The standard error
//     comes from the reports (Report.Squares): an interval's mean is a
//     mean of a few dozen samples at a small total, and without it a
//     total at its no-load latency was read as queueing by chance often
//     enough to ratchet it down. The concurrency the backend sustains at
//     the no-load latency is estimated two ways — by Little's law (in
//     flight × no-load ÷ mean) and as its throughput × the no-load
//     latency (BBR's bandwidth-delay product) — and the larger is taken:
//     a surge biases the first low, the drain after a cut the second.
//     The total goes to 9/10 of it — below the estimate, so that the
//     no-load latency is seen again and the estimate stays honest — but
//     never below half of what it was (a bounded step).
//  3. Demand: when the work in flight filled at least 80 % of the total on
//     average, and neither signal fired, the total grows by a tenth (at
//     least one slot): the backend may take more. Otherwise — no samples,
//     or demand below the total — it holds: a total fed nothing never
//     drifts to the floor or the ceiling by itself.
//
// Growth remembers the last overload or latency cut: for 40 intervals after
// one, the total returns at once (doubling at most) to one slot below the
// total that met the overload, or to the capacity the latency cut
// estimated, and probes above it one slot at a time, once every 8
// intervals. So a hard limit that answers overload at once — a vendor's
// hidden concurrency, a pool of connections — is found and then touched
// rarely (about one interval in ten), instead of every other interval;
// after 40 calm intervals the memory is dropped and a backend that grew
// is found again at full speed. A latency estimate is softer: a probe
// above it whose report met nothing raises it, and the next probe follows
// at once (a slot every two intervals, the reports being an interval
// late), so an estimate that a transient made low is corrected within
// seconds; a probe met by queueing while the estimate agrees with the
// memory (within a slot) goes back to it, instead of below. Otherwise the
// memory or the no-load latency is wrong, and the cut below the estimate
// measures them again. Reports of the two intervals after a cut may
// predate it: past the tolerance they may cut deeper, not by a further
// step; under it they hold.
//
// Between intervals, Early lets each process cut what it alone enforces
// at once when its own last completions are past the tolerance: the
// agreed total answers two intervals late, and a surge served at a total
// twice the capacity for that long is served late.
//
// The no-load latency is learned from the work itself: the lowest interval
// mean seen (the first interval's, to begin with), allowed to rise by 1 %
// in each interval in which the total does not grow, so that a backend that became slower for good is
// accepted after a while (70 intervals to double) instead of being read as
// queueing forever. So the total should start (the parent's max) where the
// backend is not overloaded: a start far above its capacity, under
// overload from the first interval, takes the queueing latency for the
// no-load one and never cuts.
//
// Every process's reports are merged (sums), so the law sees the whole
// fleet; Next is a pure function of the previous state and the reports,
// so that whichever process decides an interval, the outcome is the same.
package tune

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// The law's constants (see the package comment).
const (
	overloadShare = 0.01 // share of ended work with an overload signal that cuts the total
	backoff       = 0.9  // the cut on overload
	headroom      = 0.9  // the total against the estimated capacity after a latency cut: below it, so that the no-load latency is seen again
	maxCut        = 0.5  // a latency cut keeps at least this share of the total
	growth        = 0.1  // the growth when demand fills the total
	busy          = 0.8  // the share of the total in flight that counts as filling it
	drift         = 1.01 // how fast the no-load latency may rise per interval
	probeEvery    = 8    // intervals between probes of the total that last met an overload
	forgetAfter   = 40   // intervals after which that total is forgotten
	aftermath     = 2    // intervals after a cut whose overloads predate it
	margin        = 2    // standard errors of an interval's mean latency that count as noise
)

// Config bounds a total.
type Config struct {
	Floor, Ceiling int
	// Tolerance: the mean latency, as a multiple of the no-load latency,
	// above which the backend counts as queueing. Above 1; +Inf: the
	// latency never cuts the total.
	Tolerance float64
}

// Report is what one process saw of a parent's work over one interval.
type Report struct {
	Done      int64         // work that completed with no overload signal
	Overloads int64         // work that ended with an overload signal
	Latency   time.Duration // the sum of Done's durations
	Squares   int64         // the sum of Done's durations squared, in µs²: their spread (0 or math.MaxInt64: not reported)
	Load      time.Duration // slot-time in flight over the interval: the integral of the slots held
}

// Add merges r into s.
func (s *Report) Add(r Report) {
	s.Done += r.Done
	s.Overloads += r.Overloads
	s.Latency += r.Latency
	s.Squares = addSquares(s.Squares, r.Squares)
	s.Load += r.Load
}

// Squares returns a sum of squared latencies, in µs², as a Report
// holds it: saturated at math.MaxInt64 (work held for hours), which
// reads as not reported.
func Squares(us2 float64) int64 {
	if us2 >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(us2)
}

func addSquares(a, b int64) int64 {
	if a < 0 || b < 0 || a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// stderr returns the standard error of r's mean latency, in
// nanoseconds: 0 when r does not say (no Squares, or saturated).
func (r Report) stderr() float64 {
	if r.Done < 2 || r.Squares <= 0 || r.Squares == math.MaxInt64 {
		return 0
	}
	n := float64(r.Done)
	mean := float64(r.Latency) / n / 1e3 // µs
	variance := float64(r.Squares)/n - mean*mean
	return math.Sqrt(max(variance, 0)/n) * 1e3
}

// Empty reports whether r holds no sample of ended work.
func (r Report) Empty() bool { return r.Done == 0 && r.Overloads == 0 }

// Reason says why a total moved, or held.
type Reason uint8

const (
	Start    Reason = iota // the starting value: nothing decided yet
	NoSample               // no work ended in the interval: held
	Steady                 // demand below the total and no signal: held
	Grown                  // demand filled the total with no signal: grown
	Latency                // the latency rose past the tolerance: cut to the capacity estimate
	Overload               // overload signals: cut
)

var reasonNames = [...]string{"start", "no samples", "steady", "demand", "latency", "overload"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// State is a total and what the law remembers.
type State struct {
	Value    int           // the total
	Baseline time.Duration // the no-load latency estimate; 0: none yet
	Reason   Reason        // why Value is what it is
	// The last overload: the total that met it (0: none remembered), and
	// the intervals since.
	Overloaded int
	Calm       int
	// Estimated: Overloaded is a latency cut's estimate of the capacity,
	// not a total that met an overload; a probe above it that meets
	// nothing raises it at once.
	Estimated bool
	// The last interval's merged inputs, for those who report them.
	Mean     time.Duration // mean latency of completed work; 0: none
	InFlight float64       // average slots in flight
	Done     int64
	Overload int64
}

// Next returns the state after an interval of the given length in which
// the processes reported reports.
func Next(c Config, s State, interval time.Duration, reports []Report) State {
	var r Report
	for _, x := range reports {
		r.Add(x)
	}
	n := State{Value: s.Value, Baseline: s.Baseline, Done: r.Done, Overload: r.Overloads,
		Overloaded: s.Overloaded, Calm: s.Calm + 1, Estimated: s.Estimated}
	if n.Calm > forgetAfter {
		n.Overloaded, n.Estimated = 0, false
	}
	if interval > 0 {
		n.InFlight = float64(r.Load) / float64(interval)
	}
	if r.Done > 0 {
		n.Mean = r.Latency / time.Duration(r.Done)
		n.Baseline = min(n.Mean, n.Baseline)
		if n.Baseline <= 0 {
			n.Baseline = n.Mean
		}
	}
	v := float64(s.Value)
	// Queueing: the latency past the tolerance, or past half of it with
	// the total full (a total a slot or two above the capacity); the
	// mean less its noise, so that a backend at its no-load latency is
	// not read as queueing by chance.
	low := float64(n.Mean) - margin*r.stderr()
	heavy := r.Done > 0 && low > c.Tolerance*float64(n.Baseline)
	queueing := heavy || r.Done > 0 && n.InFlight >= busy*v && low > (1+(c.Tolerance-1)/2)*float64(n.Baseline)
	switch ended := r.Done + r.Overloads; {
	case ended == 0:
		n.Reason = NoSample
	case r.Overloads > 0 && float64(r.Overloads) >= overloadShare*float64(ended) && s.Overloaded > 0 && s.Calm < aftermath:
		// The reports of the intervals right after a cut were made before
		// it reached every process: they say nothing of the cut total.
		n.Reason = Overload
	case r.Overloads > 0 && float64(r.Overloads) >= overloadShare*float64(ended):
		n.Reason, v = Overload, Cut(s.Value)
		// What met the overload is what was in flight, not a total that
		// grew while the reports were on their way.
		n.Overloaded, n.Calm, n.Estimated = s.Value, 0, false
		if n.InFlight > 0 {
			n.Overloaded = min(s.Value, int(math.Ceil(n.InFlight)))
		}
	case queueing:
		// The concurrency the backend sustains at the no-load latency,
		// two ways: by Little's law (in flight × no-load ÷ mean) and as
		// its throughput × the no-load latency (BBR's bandwidth-delay
		// product). A surge biases the first low (the work that completed
		// started before the queue built), the drain after a cut the
		// second (the work in flight falls at once, what completes still
		// queued): the larger of the two. The total goes below it
		// (headroom), so that the no-load latency is seen again.
		capacity := n.InFlight * float64(n.Baseline) / float64(n.Mean)
		if interval > 0 {
			capacity = math.Max(capacity, float64(r.Done)*float64(n.Baseline)/float64(interval))
		}
		cut := math.Floor(math.Max(capacity*headroom, v*maxCut))
		n.Reason = Latency
		switch {
		case s.Overloaded > 0 && s.Value >= s.Overloaded-1 && capacity >= float64(s.Overloaded-2):
			// A probe past the capacity remembered, met, and the estimate
			// agrees with it (within a slot): back to it. Otherwise the
			// memory or the no-load latency is wrong, and the cut below
			// measures them again.
			v = float64(s.Overloaded - 1)
		case s.Overloaded > 0 && s.Calm < aftermath:
			// The reports right after a cut may predate it: past the
			// tolerance, they cut deeper if they say so, but not by a
			// further step; under it, they hold.
			if heavy {
				v = math.Min(v, cut)
				n.Overloaded = min(s.Overloaded, int(math.Ceil(capacity))+1)
			}
		default:
			v = math.Min(cut, v-1)
			// Growth returns to the capacity at once, then probes it.
			n.Overloaded, n.Calm, n.Estimated = int(math.Ceil(capacity))+1, 0, true
		}
	case n.InFlight >= busy*v:
		n.Reason, v = Grown, grow(v, &n)
	default:
		n.Reason = Steady
	}
	n.Value = min(max(int(math.Round(v)), c.Floor), c.Ceiling)
	// The no-load latency may rise, but not while the total grows: a
	// total probing past the capacity raises the latency slowly, and a
	// baseline that followed it would never see the queueing.
	if r.Done > 0 && n.Reason != Grown {
		n.Baseline = min(n.Mean, time.Duration(float64(s.Baseline)*drift))
		if s.Baseline <= 0 {
			n.Baseline = n.Mean
		}
	}
	return n
}

// EarlyWindow is how many completions a process gathers before it checks
// them on its own (Early).
const EarlyWindow = 16

// Early reads a process's last completions (window: EarlyWindow of them
// or more), under the agreed state s, before the processes agree on the
// interval: when their mean latency, less twice its standard error, is
// past the tolerance, the backend is queueing now, and Early returns the
// factor by which the process cuts the total it enforces at once — the
// no-load latency ÷ the mean (what a processor-sharing backend's
// capacity is of a full total), less the headroom, by half at most. So a
// surge or a backend that lost capacity is met within a few dozen
// completions instead of two intervals. Not before a no-load latency is
// known, nor in the two intervals after a cut, whose completions predate
// it.
func Early(c Config, s State, window Report) (float64, bool) {
	if s.Baseline <= 0 || window.Done < EarlyWindow || s.Overloaded > 0 && s.Calm < aftermath {
		return 0, false
	}
	mean := float64(window.Latency) / float64(window.Done)
	if mean-margin*window.stderr() <= c.Tolerance*float64(s.Baseline) {
		return 0, false
	}
	return math.Max(maxCut, headroom*float64(s.Baseline)/mean), true
}

// Cut returns the total after an overload cut of v: 9/10, and one slot at
// least. A process that meets an overload applies it at once to what it
// enforces, before the next total is agreed.
func Cut(v int) float64 { return math.Min(math.Floor(float64(v)*backoff), float64(v-1)) }

// grow returns the total after growth from v, given the memory of the
// last overload in n, which it updates.
func grow(v float64, n *State) float64 {
	next := v + math.Max(1, v*growth)
	if n.Overloaded == 0 {
		return next
	}
	edge := float64(n.Overloaded - 1) // the most below the total that met the overload
	switch {
	case v < edge:
		return math.Min(math.Max(next, 2*v), edge) // back at once, if no more than doubling
	case n.Estimated && v > edge && n.Calm%probeEvery == 2:
		// A probe above an estimate whose report met nothing: the
		// capacity is above it. The estimate rises to it, and the next
		// probe follows at once.
		n.Overloaded, n.Calm = int(v)+1, 0
		return v + 1
	case n.Calm%probeEvery == 0:
		return v + 1 // a probe, one slot
	default:
		return v
	}
}

// The encodings below are what stores keep: opaque bytes to them.
const (
	reportVersion = 2
	stateVersion  = 3
)

// ErrEncoding is the error of bytes that are not a report or a state of
// this version.
var ErrEncoding = errors.New("tune: not an encoded report or state")

// Encode returns r as bytes.
func (r Report) Encode() []byte {
	b := []byte{reportVersion}
	for _, v := range []int64{r.Done, r.Overloads, int64(r.Latency), int64(r.Load), r.Squares} {
		b = binary.AppendVarint(b, v)
	}
	return b
}

// DecodeReport reads a report Encode wrote, or the version before (of a
// process not yet upgraded: no Squares).
func DecodeReport(b []byte) (Report, error) {
	v, err := varints(b, reportVersion, 5)
	if len(b) > 0 && b[0] == reportVersion-1 {
		v, err = varints(b, reportVersion-1, 4)
		v = append(v, 0)
	}
	if err != nil {
		return Report{}, err
	}
	return Report{Done: v[0], Overloads: v[1], Latency: time.Duration(v[2]), Load: time.Duration(v[3]), Squares: v[4]}, nil
}

// Encode returns s as bytes.
func (s State) Encode() []byte {
	b := []byte{stateVersion}
	for _, v := range []int64{int64(s.Value), int64(s.Baseline), int64(s.Reason), int64(s.Mean),
		int64(math.Float64bits(s.InFlight)), s.Done, s.Overload, int64(s.Overloaded), int64(s.Calm), bit(s.Estimated)} {
		b = binary.AppendVarint(b, v)
	}
	return b
}

// DecodeState reads a state Encode wrote, or the version before (of a
// process not yet upgraded: its memory counts as an overload's).
func DecodeState(b []byte) (State, error) {
	v, err := varints(b, stateVersion, 10)
	if len(b) > 0 && b[0] == stateVersion-1 {
		v, err = varints(b, stateVersion-1, 9)
		v = append(v, 0)
	}
	if err != nil {
		return State{}, err
	}
	return State{Value: int(v[0]), Baseline: time.Duration(v[1]), Reason: Reason(v[2]), Mean: time.Duration(v[3]),
		InFlight: math.Float64frombits(uint64(v[4])), Done: v[5], Overload: v[6], Overloaded: int(v[7]), Calm: int(v[8]),
		Estimated: v[9] != 0}, nil
}

func bit(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// varints reads n varints after the version byte.
func varints(b []byte, version byte, n int) ([]int64, error) {
	if len(b) == 0 || b[0] != version {
		return nil, ErrEncoding
	}
	b = b[1:]
	out := make([]int64, n)
	for i := range out {
		v, k := binary.Varint(b)
		if k <= 0 {
			return nil, ErrEncoding
		}
		out[i], b = v, b[k:]
	}
	if len(b) != 0 {
		return nil, ErrEncoding
	}
	return out, nil
}
