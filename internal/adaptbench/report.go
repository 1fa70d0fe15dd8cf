package adaptbench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Report is an invocation's results, one per strategy.
type Report struct {
	Config  Config
	Results []Result
}

// Markdown writes the report: the workload in a line, a table with a row per
// strategy, and one with a row per strategy and phase.
func (r *Report) Markdown(w io.Writer) error {
	c := r.Config
	var b strings.Builder
	var sched []string
	for _, p := range c.Phases {
		sched = append(sched, fmt.Sprintf("%s %s (C=%d)", p.Name, p.Duration, p.Capacity))
	}
	fmt.Fprintf(&b, "C0 = %d, S = %s ±%.0f %%, SLO %s, wait %s, %d processes, %d tenants (t00 sends %.0f %%), %d round(s); phases: %s. Loads are multiples of C0/S = %.0f/s; goodput is good completions/s ÷ C/S of the C in force.\n\n",
		c.Capacity, c.Service, 100*c.Jitter, c.SLO, c.Wait, c.Processes, c.Tenants, 100*c.Flood, c.Rounds,
		strings.Join(sched, " → "), float64(c.Capacity)/c.Service.Seconds())

	var steps []string
	for _, p := range c.Phases[1:] {
		steps = append(steps, p.Name)
	}
	b.WriteString("| strategy | goodput | p50 | p99 | errors | refused | settle (s) → " + strings.Join(steps, " / ") +
		" | Jain, 19 light | flood share | peak in-flight |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, res := range r.Results {
		var settle []string
		for _, s := range res.Settle {
			if s < 0 {
				settle = append(settle, "–")
			} else {
				settle = append(settle, fmt.Sprintf("%.2f", s.Seconds()))
			}
		}
		refused := pct(res.RefusedRate)
		if res.FailedRate > 0 {
			refused += fmt.Sprintf(" (%s failed)", pct(res.FailedRate))
		}
		fmt.Fprintf(&b, "| %s | %.2f | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			res.Strategy, res.Goodput, ms(res.P50), ms(res.P99), pct(res.ErrorRate), refused,
			strings.Join(settle, " / "), num(res.Jain, 3), pct(res.FloodShare), res.Peak)
	}

	fmt.Fprintf(&b, "\n| strategy | phase | C | goodput | p50 | p99 | p99 after %s | errors | refused | peak in-flight | total limit |\n", settleBudget)
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, res := range r.Results {
		for _, p := range res.Phases {
			fmt.Fprintf(&b, "| %s | %s | %d | %.2f | %s | %s | %s | %s | %s | %d | %s |\n",
				res.Strategy, p.Name, p.Capacity, p.Goodput, ms(p.P50), ms(p.P99), ms(p.P99Settled), pct(p.ErrorRate), pct(p.RefusedRate),
				p.Peak, num(p.MeanLimit, 1))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.1f %%", 100*x)
}

func num(x float64, prec int) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, x)
}
