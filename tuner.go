package keycap

import (
	"context"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap/internal/tune"
	"github.com/keycap/keycap/store"
)

// Tuning is where an adaptive total stands (Limiter.Tuning), and what the
// event TotalChanged reports.
type Tuning struct {
	Parent   string // the parent's name
	Total    int    // the total: enforced, or computed in shadow
	Previous int    // TotalChanged: the total before
	Shadow   bool   // computed and reported, never enforced (Adaptive.Shadow)
	Reason   string // why it is what it is: "start", "no samples", "steady", "demand", "latency", "overload"
	Version  int64  // the interval that decided it (0: none yet)

	// What the last interval reported, on every process.
	Mean      time.Duration // mean latency of the work completed; 0: none
	Baseline  time.Duration // the no-load latency estimate; 0: none yet
	InFlight  float64       // average slots held
	Completed int64         // work that completed without an overload signal
	Overloads int64         // work that ended with one
}

// Tuning returns where the Limiter's adaptive total of p stands, and
// whether it runs one: it starts with the first Acquire of a limit of p.
func (l *Limiter) Tuning(p *Parent) (Tuning, bool) {
	t := l.tuners.find(p)
	if t == nil {
		return Tuning{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tuning(), true
}

// tuners are a Limiter's adaptive totals, one per parent it has used: per
// parent pool, so that two Parents of one name (each front door's, a
// reload's) are one total here, and this node's reports of it are one. A
// Parent of the same name with other settings (a reload that changed
// them) replaces the tuner; the new one follows the total the store holds.
type tuners struct {
	l       *Limiter
	m       atomic.Pointer[map[store.PoolID]*tuner] // by the parent's pool; copied on write: read on every decision of an adaptive parent
	mu      sync.Mutex                              // orders writers
	closed  bool                                    // guarded by mu
	stopped []*tuner                                // replaced, stopping: Close waits for them; guarded by mu
}

// find returns p's tuner, nil when none runs.
func (ts *tuners) find(p *Parent) *tuner {
	if m := ts.m.Load(); m != nil {
		return (*m)[p.pool]
	}
	return nil
}

// of returns p's tuner, started if needed; nil once the Limiter is closed.
func (ts *tuners) of(p *Parent) *tuner {
	if t := ts.find(p); t != nil && t.serves(p) {
		return t
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	old := ts.find(p)
	if old != nil && old.serves(p) || ts.closed {
		return old
	}
	if old != nil { // replaced: a Parent of its name with other settings
		close(old.stop)
		live := ts.stopped[:0]
		for _, s := range ts.stopped {
			select {
			case <-s.done: // stopped: nothing to wait for
			default:
				live = append(live, s)
			}
		}
		ts.stopped = append(live, old)
	}
	m := map[store.PoolID]*tuner{}
	if cur := ts.m.Load(); cur != nil {
		maps.Copy(m, *cur)
	}
	t := newTuner(ts.l, p)
	m[p.pool] = t
	ts.m.Store(&m)
	go t.loop()
	return t
}

// close stops every tuner and waits for them.
func (ts *tuners) close() {
	ts.mu.Lock()
	ts.closed = true
	var list []*tuner
	if m := ts.m.Load(); m != nil {
		for _, t := range *m {
			list = append(list, t)
			close(t.stop)
		}
	}
	list = append(list, ts.stopped...)
	ts.mu.Unlock()
	for _, t := range list {
		<-t.done
	}
}

// serves reports whether t tunes p: p itself, or a Parent of the same pool
// and the same settings.
func (t *tuner) serves(p *Parent) bool {
	return t.p == p || t.p.max == p.max && t.a == *p.adaptive
}

// tuner runs one adaptive total for one Limiter: it gathers the samples of
// the leases of the parent's keys, reports them to the store each
// interval, and follows the total the store holds.
type tuner struct {
	l     *Limiter
	p     *Parent
	a     Adaptive
	value atomic.Int64 // the total the Limiter's demands carry
	steps atomic.Int64 // intervals stepped through, for tests
	stop  chan struct{}
	done  chan struct{}

	// The interval's samples so far: every lease of the parent's keys
	// passes here twice. load is the slot-time held since the interval
	// began, less held × now: each grant at t takes w × t, each release
	// adds it back, and the step adds held × its time. held and load move
	// together under sample (read apart, a step between the two would
	// count a slot for the whole life of the Limiter); the counts are
	// atomics.
	sample                        sync.Mutex
	held, load                    int64       // guarded by sample
	squares                       float64     // the latencies squared, in µs²; guarded by sample
	early                         tune.Report // the latest completions, not yet checked (tune.Early); guarded by sample
	completed, overloads, latency atomic.Int64

	mu       sync.Mutex // guards the rest
	state    tune.State // the total as last read
	version  int64
	previous int

	// A cut applied here at once when work meets an overload, before the
	// processes agree on one (which takes two intervals: the reports of
	// an interval are read after the next): what this Limiter enforces is
	// at most local until it lapses. So a hard limit met by a probe is
	// left within a round trip of the backend, not two intervals later.
	local, localUntil, lastCut time.Duration // local: a total, in slots; 0: none
}

func newTuner(l *Limiter, p *Parent) *tuner {
	t := &tuner{l: l, p: p, a: *p.adaptive, stop: make(chan struct{}), done: make(chan struct{}),
		state: tune.State{Value: p.max}, previous: p.max}
	t.value.Store(int64(p.max))
	return t
}

// shared returns what a demand of lim adds, with the total this Limiter
// enforces in place of the parent's max: lim.shared itself but for an
// adaptive parent not in shadow.
func (l *Limiter) shared(lim *Limit) *store.Shared {
	if p := lim.spec.Parent; p == nil || p.adaptive == nil {
		return lim.shared // inlined: the path of every other limit
	}
	return l.adapted(lim)
}

// adapted is shared for a limit of an adaptive parent.
func (l *Limiter) adapted(lim *Limit) *store.Shared {
	p := lim.spec.Parent
	if lim.shared == nil || p.adaptive.Shadow {
		return lim.shared
	}
	t := l.tuners.of(p)
	if t == nil {
		return lim.shared
	}
	v := int(t.value.Load())
	if v == lim.shared.Parent.Max {
		return lim.shared
	}
	sh := *lim.shared
	sh.Parent.Max = v
	return &sh
}

// started counts w slots of the parent taken.
func (t *tuner) started(w int) {
	now := int64(t.l.now())
	t.sample.Lock()
	t.held += int64(w)
	t.load -= int64(w) * now
	t.sample.Unlock()
}

// holding reports whether the parent's keys hold slots here.
func (t *tuner) holding() bool {
	t.sample.Lock()
	defer t.sample.Unlock()
	return t.held > 0
}

// ended counts w slots given back after held; overloaded: the work met an
// overload signal. A slot ends in the tuner that counted its start.
func (t *tuner) ended(w int, held time.Duration, overloaded bool) {
	now := int64(t.l.now())
	us := float64(held) / float64(time.Microsecond)
	var window tune.Report
	t.sample.Lock()
	t.held -= int64(w)
	t.load += int64(w) * now
	if !overloaded {
		t.squares += us * us
		t.early.Done++
		t.early.Latency += held
		t.early.Squares = tune.Squares(float64(t.early.Squares) + us*us)
		if t.early.Done >= tune.EarlyWindow {
			window, t.early = t.early, tune.Report{}
		}
	}
	t.sample.Unlock()
	if overloaded {
		t.overloads.Add(1)
		t.mu.Lock()
		t.cutHere(tune.Cut)
		t.mu.Unlock()
		return
	}
	t.completed.Add(1)
	t.latency.Add(int64(held))
	if window.Done > 0 && !t.a.OverloadsOnly {
		t.mu.Lock()
		if f, ok := tune.Early(tune.Config{Tolerance: t.a.Tolerance}, t.state, window); ok {
			t.cutHere(func(v int) float64 { return math.Min(math.Floor(float64(v)*f), float64(v-1)) })
		}
		t.mu.Unlock()
	}
}

// take returns the interval's samples and starts the next, at now.
func (t *tuner) take(now time.Duration) tune.Report {
	r := tune.Report{Done: t.completed.Swap(0), Overloads: t.overloads.Swap(0), Latency: time.Duration(t.latency.Swap(0))}
	t.sample.Lock()
	defer t.sample.Unlock()
	r.Squares, t.squares = tune.Squares(t.squares), 0
	// the slot-time so far, and the slots still held start the next
	// interval from now
	r.Load = max(time.Duration(t.load+t.held*int64(now)), 0)
	t.load = -t.held * int64(now)
	return r
}

// cutHere cuts what this Limiter enforces at once, to cut of it, at most
// once an interval, until the agreed total catches up (three intervals):
// on an overload (tune.Cut), or on a latency its own last completions
// show (tune.Early). The caller holds t.mu.
func (t *tuner) cutHere(cut func(int) float64) {
	now := t.l.precise()
	if t.a.Shadow || (t.lastCut != 0 && now-t.lastCut < t.a.Interval) {
		return
	}
	cur := int(t.value.Load())
	c := max(int(cut(cur)), t.a.Floor)
	if c >= cur {
		return
	}
	t.local, t.localUntil, t.lastCut = time.Duration(c), now+3*t.a.Interval, now
	t.value.Store(int64(c))
}

// idleFor is how long a tuner whose parent's keys hold nothing and
// ended nothing keeps running: then it stops, and the next Acquire of the
// parent starts another, which follows the total the store holds. So a
// parent a reload replaced, or one no longer used, costs nothing.
var idleFor = time.Minute // a variable for tests

// loop reports and follows the total once per interval, a little after
// each interval's start by the wall clock, until the Limiter closes or the
// parent has been idle for idleFor.
func (t *tuner) loop() {
	defer close(t.done)
	every := t.a.Interval
	// At once, not at the next interval: a process that starts (or a
	// tuner that starts again) follows the total the others agreed on
	// after one round trip, instead of carrying the parent's start for up
	// to an interval. Its report of the interval before is all it has seen.
	t.step(time.Now().UnixNano()/int64(every) - 1)
	idle := 0
	for {
		now := time.Now()
		period := now.UnixNano() / int64(every)
		next := time.Unix(0, (period+1)*int64(every)+int64(every)/8)
		timer := time.NewTimer(next.Sub(now))
		select {
		case <-t.stop:
			timer.Stop()
			return
		case <-timer.C:
		}
		if t.step(period) {
			idle = 0
		} else if idle++; time.Duration(idle)*every >= idleFor && t.l.tuners.retire(t) {
			return
		}
		t.steps.Add(1)
	}
}

// retire removes t, if its parent's keys still hold nothing, and reports
// whether it did.
func (ts *tuners) retire(t *tuner) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	busy := t.holding() || t.completed.Load() > 0 || t.overloads.Load() > 0
	m := ts.m.Load()
	if busy || ts.closed || m == nil || (*m)[t.p.pool] != t {
		return false
	}
	next := maps.Clone(*m)
	delete(next, t.p.pool)
	ts.m.Store(&next)
	return true
}

// step reports the interval that ended (period, by the wall clock) and
// decides the one before it if nobody has. It reports whether the parent's
// keys held or ended anything here.
func (t *tuner) step(period int64) (busy bool) {
	rep := t.take(t.l.now())
	busy = t.holding() || !rep.Empty()

	l := t.l
	ctx, cancel := context.WithTimeout(context.Background(), l.budget)
	defer cancel()
	keep := max(time.Minute, 100*t.a.Interval)
	tot, reports, err := l.store.ReportTotal(ctx, t.p.pool, l.nodes.id, period, rep.Encode(), 4*t.a.Interval)
	if err != nil {
		return busy // the store is out: the total stays as it is here
	}
	if tot.Version < period-1 && len(reports) > 0 {
		cur := t.current(tot)
		list := make([]tune.Report, 0, len(reports))
		for _, b := range reports {
			if r, err := tune.DecodeReport(b); err == nil {
				list = append(list, r)
			}
		}
		tol := t.a.Tolerance
		if t.a.OverloadsOnly {
			tol = math.Inf(1) // no latency is past it
		}
		next := tune.Next(tune.Config{Floor: t.a.Floor, Ceiling: t.a.Ceiling, Tolerance: tol}, cur, t.a.Interval, list)
		got, _, err := l.store.SetTotal(ctx, t.p.pool, tot.Version, store.Total{Version: period - 1, State: next.Encode()}, keep)
		if err != nil {
			return busy
		}
		tot = got
	}
	if tot.Version == 0 {
		return busy
	}
	t.follow(tot.Version, t.current(tot))
	return busy
}

// current decodes tot's state; the start when there is none or it cannot
// be read.
func (t *tuner) current(tot store.Total) tune.State {
	if tot.Version != 0 {
		if s, err := tune.DecodeState(tot.State); err == nil && s.Value > 0 {
			s.Value = min(max(s.Value, t.a.Floor), t.a.Ceiling)
			return s
		}
	}
	return tune.State{Value: t.p.max}
}

// follow makes s, of version, the total here, and reports a change.
func (t *tuner) follow(version int64, s tune.State) {
	t.mu.Lock()
	if version <= t.version {
		t.mu.Unlock()
		return
	}
	prev := t.state.Value
	t.state, t.version = s, version
	if !t.a.Shadow {
		v := s.Value
		if t.local > 0 && t.l.precise() < t.localUntil {
			v = min(v, int(t.local))
		} else {
			t.local = 0
		}
		t.value.Store(int64(v))
	}
	var e Tuning
	changed := s.Value != prev
	if changed {
		t.previous = prev
		e = t.tuning()
	}
	t.mu.Unlock()
	if changed {
		t.l.emit(Event{Kind: TotalChanged, Tuning: &e})
	}
}

// tuning reports t. The caller holds t.mu.
func (t *tuner) tuning() Tuning {
	s := t.state
	return Tuning{Parent: t.p.name, Total: s.Value, Previous: t.previous, Shadow: t.a.Shadow, Reason: s.Reason.String(),
		Version: t.version, Mean: s.Mean, Baseline: s.Baseline, InFlight: s.InFlight, Completed: s.Done, Overloads: s.Overload}
}
