// Package fairtest measures how fairly a total is shared: tenants of
// different demand run fixed-length jobs through a Limiter, and the report
// gives each tenant's share of the slots, its waits, and Jain's fairness
// index over the shares as a fraction of their demand-capped fair shares.
// The same run works in one process (memstore) or split over several
// processes sharing a store (Run in each, Merge the tallies).
package fairtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keycap/keycap"
)

// Modes: how the tenants are limited.
const (
	Parents   = "parents"      // each tenant's pool under a parent: the fair share
	OneLine   = "one line"     // a plain cap on the total: one line, first come first served
	KeysOnly  = "per-key only" // per-tenant caps and no total
	Unlimited = "no limit"
)

// Config is one run.
type Config struct {
	Mode  string
	Name  string        // the limits' name: unique per run
	Total int           // the parent's slots, each tenant's cap too
	Job   time.Duration // how long a job holds its slot
	For   time.Duration // how long the run is measured
	// Warmup is how long callers run before the measure starts (0: one
	// job): the start's transients (slots borrowed while the parent is
	// empty) are left out.
	Warmup time.Duration
}

// warmup returns c's warm-up.
func (c Config) warmup() time.Duration {
	if c.Warmup > 0 {
		return c.Warmup
	}
	return c.Job
}

// RunFunc runs tenants under c (its Name left to it: unique per run) and
// reports the run: in one process, or over several.
type RunFunc func(b *testing.B, c Config, tenants []Tenant) Report

// Tenant is one tenant and how many callers it runs at once (its demand).
type Tenant struct {
	Name    string
	Callers int
	Job     time.Duration // how long each of its jobs holds its slot (0: the run's)
}

// Tally is one tenant's jobs on one process: when each held its slot, and
// how long each waited for it, in Unix nanoseconds and nanoseconds.
type Tally struct {
	Holds [][2]int64 `json:"holds"`
	Waits []int64    `json:"waits"`
}

// limits returns the limits of a job of tenant under c.
func (c Config) limits(tenant string) []keycap.Limit {
	const wait = time.Minute
	switch c.Mode {
	case Parents:
		p := keycap.MustParent(c.Name, c.Total)
		return []keycap.Limit{keycap.Spec{Name: c.Name, Max: c.Total, Parent: p, Wait: wait}.For(tenant)}
	case OneLine:
		return []keycap.Limit{keycap.Spec{Name: c.Name + ":total", Max: c.Total, Wait: wait}.For("")}
	case KeysOnly:
		return []keycap.Limit{keycap.Spec{Name: c.Name + ":tenant", Max: c.Total, Wait: wait}.For(tenant)}
	}
	return nil
}

// Run runs the callers of tenants on l, and returns each tenant's tally.
// Each caller starts at a random moment of the first job length after
// start, as callers that do not arrive in step; the run is measured from
// start plus a job length, for c.For. Callers start no job after the end;
// the ones waiting then finish theirs.
func Run(ctx context.Context, l *keycap.Limiter, c Config, tenants []Tenant, start time.Time) (map[string]*Tally, error) {
	end := start.Add(c.warmup() + c.For)
	time.Sleep(time.Until(start))
	out := map[string]*Tally{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for _, tn := range tenants {
		tally := &Tally{}
		out[tn.Name] = tally
		limits := c.limits(tn.Name)
		job := c.Job
		if tn.Job > 0 {
			job = tn.Job
		}
		for range tn.Callers {
			wg.Go(func() {
				time.Sleep(rand.N(c.Job))
				for time.Now().Before(end) && ctx.Err() == nil {
					t0 := time.Now()
					var ls *keycap.Lease
					if len(limits) > 0 {
						var err error
						if ls, err = l.Acquire(ctx, limits...); errors.Is(err, keycap.ErrLimitExceeded) {
							continue // waited its whole wait: asks again, as a client would
						} else if err != nil {
							if ctx.Err() == nil {
								select {
								case errs <- fmt.Errorf("tenant %s: %w", tn.Name, err):
								default:
								}
							}
							return
						}
					}
					t1 := time.Now()
					time.Sleep(job)
					t2 := time.Now()
					if ls != nil {
						ls.Release()
					}
					mu.Lock()
					tally.Waits = append(tally.Waits, int64(t1.Sub(t0)))
					tally.Holds = append(tally.Holds, [2]int64{t1.UnixNano(), t2.UnixNano()})
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		return out, err
	default:
	}
	return out, nil
}

// Merge adds the tallies of several processes.
func Merge(parts ...map[string]*Tally) map[string]*Tally {
	out := map[string]*Tally{}
	for _, p := range parts {
		for name, t := range p {
			m := out[name]
			if m == nil {
				m = &Tally{}
				out[name] = m
			}
			m.Holds = append(m.Holds, t.Holds...)
			m.Waits = append(m.Waits, t.Waits...)
		}
	}
	return out
}

// Row is one tenant's outcome.
type Row struct {
	Tenant   string
	Demand   int
	Slots    float64 // slots held on average over the run
	Share    float64 // of the slots held by every tenant
	Fair     float64 // its demand-capped fair share
	P50, P99 time.Duration
	Jobs     int // every job, the ones finished after the run included
	Started  int // jobs that started during the run
}

// Report is a run's outcome.
type Report struct {
	Mode string
	For  time.Duration // the run's length
	Rows []Row
	Jain float64 // over Share/Fair of every tenant: 1 is perfectly fair
	Peak int     // the most slots held at once, every tenant together
}

// Analyse reports the run of tenants under c that started at start.
func Analyse(c Config, tenants []Tenant, start time.Time, tallies map[string]*Tally) Report {
	from, to := start.Add(c.warmup()).UnixNano(), start.Add(c.warmup()+c.For).UnixNano()
	demands := make([]int, len(tenants))
	for i, tn := range tenants {
		demands[i] = tn.Callers
	}
	fair := maxMin(c.Total, demands)
	fairSum := 0.0
	for _, f := range fair {
		fairSum += f
	}
	r := Report{Mode: c.Mode, For: c.For}
	total := 0.0
	var edges [][2]int64 // +1/-1 at each hold's start and end
	for _, tn := range tenants {
		t := tallies[tn.Name]
		row := Row{Tenant: tn.Name, Demand: tn.Callers}
		if t != nil {
			held := int64(0)
			for _, h := range t.Holds {
				if a, b := max(h[0], from), min(h[1], to); b > a {
					held += b - a
				}
				if h[0] >= from && h[0] < to {
					row.Started++
				}
				edges = append(edges, [2]int64{h[0], 1}, [2]int64{h[1], -1})
			}
			row.Slots = float64(held) / float64(to-from)
			waits := slices.Clone(t.Waits)
			slices.Sort(waits)
			row.P50, row.P99 = pct(waits, 0.5), pct(waits, 0.99)
			row.Jobs = len(t.Holds)
		}
		total += row.Slots
		r.Rows = append(r.Rows, row)
	}
	slices.SortFunc(edges, func(a, b [2]int64) int {
		if a[0] != b[0] {
			return int(min(max(a[0]-b[0], -1), 1))
		}
		return int(a[1] - b[1]) // an end before a start at the same instant
	})
	in := 0
	for _, e := range edges {
		in += int(e[1])
		r.Peak = max(r.Peak, in)
	}
	var sum, sq float64
	for i := range r.Rows {
		row := &r.Rows[i]
		if total > 0 {
			row.Share = row.Slots / total
		}
		row.Fair = fair[i] / fairSum
		x := row.Share / row.Fair
		sum += x
		sq += x * x
	}
	if sq > 0 {
		r.Jain = sum * sum / (float64(len(r.Rows)) * sq)
	}
	return r
}

func pct(sorted []int64, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return time.Duration(sorted[min(len(sorted)-1, int(float64(len(sorted))*p))])
}

// maxMin returns the max-min fair allocation of capacity among demands:
// every demand below the equal split is met, and what it leaves is split
// among the others the same way.
func maxMin(capacity int, demands []int) []float64 {
	out := make([]float64, len(demands))
	left := float64(capacity)
	open := len(demands)
	done := make([]bool, len(demands))
	for open > 0 {
		split := left / float64(open)
		progress := false
		for i, d := range demands {
			if !done[i] && float64(d) <= split {
				out[i], done[i] = float64(d), true
				left -= float64(d)
				open--
				progress = true
			}
		}
		if !progress {
			for i := range demands {
				if !done[i] {
					out[i] = split
				}
			}
			break
		}
	}
	return out
}

// String renders the report as a table.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s Jain %.3f, peak %d slots at once\n", r.Mode+":", r.Jain, r.Peak)
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "  %-8s demand %3d  slots %5.2f  share %5.1f%% (fair %5.1f%%)  wait p50 %8s  p99 %8s  jobs %d\n",
			row.Tenant, row.Demand, row.Slots, 100*row.Share, 100*row.Fair,
			row.P50.Round(100*time.Microsecond), row.P99.Round(100*time.Microsecond), row.Jobs)
	}
	return b.String()
}

// Row returns the row of tenant.
func (r Report) Row(tenant string) (Row, error) {
	for _, row := range r.Rows {
		if row.Tenant == tenant {
			return row, nil
		}
	}
	return Row{}, errors.New("fairtest: no tenant " + tenant)
}

// ReportMetrics reports r as benchmark metrics: Jain's index, the peak, and
// each tenant's share and p99 wait (in jobs).
func ReportMetrics(b interface{ ReportMetric(float64, string) }, r Report, job time.Duration) {
	b.ReportMetric(r.Jain, "jain")
	b.ReportMetric(float64(r.Peak), "peak-slots")
	for _, row := range r.Rows {
		b.ReportMetric(100*row.Share, row.Tenant+"-share-%")
		b.ReportMetric(float64(row.P99)/float64(job), row.Tenant+"-p99-jobs")
	}
	b.ReportMetric(0, "ns/op")
}

// Check fails t unless the parents' run r of the workload was fair,
// in the ways that hold on a loaded machine too: the total held (at most
// total slots at once), Jain's index at least 0.95, and each light
// tenant's median wait at most a job and a quarter of the flood's — in one
// line the light tenants wait as long as the flood. (The p99 against the
// flood's absence is BENCHMARKS.md's, measured on a quiet machine: on one
// that two suites load at once, a waiter can miss its notification and
// wait for its poll.)
func Check(t testing.TB, r Report, total int, job time.Duration, flood string, light ...string) {
	t.Helper()
	if r.Peak > total {
		t.Errorf("%d slots held at once: above the total of %d", r.Peak, total)
	}
	if r.Jain < 0.95 {
		t.Errorf("Jain's index %.3f, want at least 0.95 (aim 0.99)", r.Jain)
	}
	f, err := r.Row(flood)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range light {
		l, err := r.Row(name)
		if err != nil {
			t.Fatal(err)
		}
		if l.P50 > job || l.P50 > f.P50/4 {
			t.Errorf("%s's median wait %s against the flood's %s: it waits behind the flood (a job is %s)", name, l.P50, f.P50, job)
		}
	}
}

// The workload: a parent of 20 slots, one tenant flooding it with
// 100 callers, two light tenants with 2 each; and the light tenants alone,
// their baseline.
var (
	Workload = []Tenant{{Name: "flood", Callers: 100}, {Name: "light-a", Callers: 2}, {Name: "light-b", Callers: 2}}
	Alone    = []Tenant{{Name: "light-a", Callers: 2}, {Name: "light-b", Callers: 2}}
)

// Bench runs the workload under every mode, and the light tenants alone
// with parents, with run (one process, or several), for 5 s of 50 ms jobs
// each, and reports each as metrics and a table.
func Bench(b *testing.B, run RunFunc) {
	const job, d = 50 * time.Millisecond, 5 * time.Second
	for _, mode := range []string{Parents, OneLine, KeysOnly, Unlimited, "alone"} {
		b.Run(mode, func(b *testing.B) {
			var r Report
			for range b.N {
				if mode == "alone" {
					r = run(b, Config{Mode: Parents, Total: 20, Job: job, For: d}, Alone)
				} else {
					r = run(b, Config{Mode: mode, Total: 20, Job: job, For: d}, Workload)
				}
			}
			ReportMetrics(b, r, job)
			b.Logf("\n%s", r)
		})
	}
}

// Many returns the many-tenant workload of n tenants: one flooding tenant
// with 100 callers, and n tenants with one caller each.
func Many(n int) []Tenant {
	ts := make([]Tenant, 0, n+1)
	ts = append(ts, Tenant{Name: "flood", Callers: 100})
	for i := range n {
		ts = append(ts, Tenant{Name: fmt.Sprintf("t%05d", i), Callers: 1})
	}
	return ts
}

// Grants returns the jobs started per second during the run.
func (r Report) Grants() float64 {
	n := 0
	for _, row := range r.Rows {
		n += row.Started
	}
	return float64(n) / r.For.Seconds()
}

// Served returns how many tenants started a job during the run.
func (r Report) Served() int {
	n := 0
	for _, row := range r.Rows {
		if row.Started > 0 {
			n++
		}
	}
	return n
}

// Over returns tenant's share of the slots as a multiple of its fair share.
func (r Report) Over(tenant string) float64 {
	row, err := r.Row(tenant)
	if err != nil || row.Fair == 0 {
		return 0
	}
	return row.Share / row.Fair
}

// Summary renders r in one line: for runs with too many tenants to list.
func (r Report) Summary(flood string) string {
	return fmt.Sprintf("%-12s %6.0f grants/s  Jain %.3f  %s at %.2f× its fair share  %d of %d tenants served in %s  peak %d",
		r.Mode+":", r.Grants(), r.Jain, flood, r.Over(flood), r.Served(), len(r.Rows), r.For, r.Peak)
}

// ManySizes are the many-tenant workload's sizes: tenants with one caller
// each beside the flood.
var ManySizes = []int{10, 200, 2000, 20000}

// ManyFor is how long the many-tenant workload of n tenants is measured:
// at least 5 s, and ten rounds of every tenant (a round is n+1 jobs of 20
// ms on 20 slots): the flood's fair share is one job a round, which a
// shorter run measures to a job or two. ManyWarmup is how long it runs
// before: four rounds, at least a job. The start is a burst (every caller
// asks within a job's length), and the keys served in it are charged for
// its slow releases: a key charged 60 ms waits three rounds.
func ManyFor(n int) time.Duration {
	return max(5*time.Second, 10*time.Duration(n+1)*time.Millisecond)
}

// ManyWarmup: see ManyFor.
func ManyWarmup(n int) time.Duration {
	return max(20*time.Millisecond, 4*time.Duration(n+1)*time.Millisecond)
}

// BenchMany runs the many-tenant workload at each size (up to the largest
// that limit allows: 0 for all) with parents and with one plain pool of
// the same total, 20 ms jobs for ManyFor, and reports grants/s, Jain's
// index, the flood's share over its fair share, and the parents' grants/s
// as a fraction of the plain pool's. extra, when not nil, adds a run's
// metrics of its own (the store's cost) before and after each run.
func BenchMany(b *testing.B, limit int, run RunFunc,
	extra func(b *testing.B, mode string, done bool)) {
	const job = 20 * time.Millisecond
	for _, n := range ManySizes {
		if limit > 0 && n > limit {
			continue
		}
		d, warm := ManyFor(n), ManyWarmup(n)
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			var plain, fair Report
			for range b.N {
				if extra != nil {
					extra(b, "plain", false)
				}
				plain = run(b, Config{Mode: OneLine, Total: 20, Job: job, For: d, Warmup: warm}, Many(n))
				if extra != nil {
					extra(b, "plain", true)
					extra(b, "parent", false)
				}
				fair = run(b, Config{Mode: Parents, Total: 20, Job: job, For: d, Warmup: warm}, Many(n))
				if extra != nil {
					extra(b, "parent", true)
				}
			}
			b.ReportMetric(fair.Grants(), "grants/s")
			b.ReportMetric(plain.Grants(), "plain-grants/s")
			b.ReportMetric(fair.Grants()/plain.Grants(), "of-plain")
			b.ReportMetric(fair.Jain, "jain")
			b.ReportMetric(fair.Over("flood"), "flood-x-fair")
			b.ReportMetric(float64(fair.Served())/float64(len(fair.Rows)), "served")
			b.ReportMetric(0, "ns/op")
			b.Logf("\n%s\n%s", fair.Summary("flood"), plain.Summary("flood"))
		})
	}
}

// Unequal is the workload of jobs of unequal length: two tenants that
// always wait (20 callers each), one with 200 ms jobs and one with 10 ms
// jobs, under a parent of 10. Fair in slot-time is 50 % each.
var Unequal = []Tenant{{Name: "long", Callers: 20, Job: 200 * time.Millisecond}, {Name: "short", Callers: 20, Job: 10 * time.Millisecond}}

// BenchUnequal runs the Unequal workload for 10 s with parents (a parent
// of 10), and reports each tenant's share of the slot-time.
func BenchUnequal(b *testing.B, run RunFunc) {
	var r Report
	for range b.N {
		r = run(b, Config{Mode: Parents, Total: 10, Job: 10 * time.Millisecond, For: 10 * time.Second, Warmup: time.Second}, Unequal)
	}
	ReportMetrics(b, r, 10*time.Millisecond)
	b.Logf("\n%s", r)
}
