// Command benchmed summarises `go test -bench -count N` output read from
// standard input: the median of every metric of every benchmark, and ratios
// between benchmarks of the same run.
//
//	go test -bench . -count 5 ./memstore | go run ./internal/benchmed \
//	    -ratio 'memstore/serial/keys=1 / x-sync-semaphore/serial/keys=1'
//
// A ratio pairs the i-th result of one benchmark with the i-th result of the
// other, both from the same `go test` run, and reports the median of those
// ratios and their range. Names are matched
// as suffixes of the benchmark name without its -GOMAXPROCS suffix. A ratio
// may name a metric: 'A / B ns/op' (the default metric is ns/op).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

type ratios []string

func (r *ratios) String() string     { return strings.Join(*r, ", ") }
func (r *ratios) Set(s string) error { *r = append(*r, s); return nil }

// results maps benchmark name → metric unit → values in run order.
type results struct {
	order []string
	vals  map[string]map[string][]float64
	units map[string][]string
}

var procSuffix = regexp.MustCompile(`-\d+$`)

func parse(r io.Reader) (*results, error) {
	res := &results{vals: map[string]map[string][]float64{}, units: map[string][]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		if _, ok := res.vals[name]; !ok {
			res.order = append(res.order, name)
			res.vals[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			unit := f[i+1]
			if _, ok := res.vals[name][unit]; !ok {
				res.units[name] = append(res.units[name], unit)
			}
			res.vals[name][unit] = append(res.vals[name][unit], v)
		}
	}
	return res, sc.Err()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (res *results) find(suffix string) (string, error) {
	var found []string
	for _, n := range res.order {
		if n == suffix || strings.HasSuffix(n, "/"+suffix) || strings.HasSuffix(n, suffix) {
			found = append(found, n)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no benchmark matches %q", suffix)
	case 1:
		return found[0], nil
	}
	for _, n := range found {
		if n == suffix {
			return n, nil
		}
	}
	return "", fmt.Errorf("%q matches several benchmarks: %s", suffix, strings.Join(found, ", "))
}

func main() {
	var rs ratios
	flag.Var(&rs, "ratio", "'A / B [unit]': median over runs of A's metric divided by B's (repeatable)")
	flag.Parse()
	res, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// One row per benchmark, one column per metric (in order of first use).
	var cols []string
	for _, n := range res.order {
		for _, u := range res.units[n] {
			if !slices.Contains(cols, u) {
				cols = append(cols, u)
			}
		}
	}
	fmt.Printf("| benchmark (median of runs) | runs | %s |\n", strings.Join(cols, " | "))
	fmt.Printf("|---|---:|%s\n", strings.Repeat("---:|", len(cols)))
	for _, n := range res.order {
		cells := make([]string, len(cols))
		runs := 0
		for i, u := range cols {
			if v, ok := res.vals[n][u]; ok {
				cells[i] = format(median(v))
				runs = max(runs, len(v))
			}
		}
		fmt.Printf("| %s | %d | %s |\n", n, runs, strings.Join(cells, " | "))
	}
	if len(rs) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("| ratio | metric | median of per-run ratios | range |")
	fmt.Println("|---|---|---:|---|")
	for _, r := range rs {
		if err := ratio(res, r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func ratio(res *results, spec string) error {
	parts := strings.SplitN(spec, " / ", 2)
	if len(parts) != 2 {
		return fmt.Errorf("ratio %q: want 'A / B [unit]'", spec)
	}
	unit := "ns/op"
	b := strings.Fields(parts[1])
	if len(b) == 2 {
		unit = b[1]
	} else if len(b) != 1 {
		return fmt.Errorf("ratio %q: want 'A / B [unit]'", spec)
	}
	na, err := res.find(strings.TrimSpace(parts[0]))
	if err != nil {
		return err
	}
	nb, err := res.find(b[0])
	if err != nil {
		return err
	}
	va, vb := res.vals[na][unit], res.vals[nb][unit]
	n := min(len(va), len(vb))
	if n == 0 {
		return fmt.Errorf("ratio %q: no %s values", spec, unit)
	}
	rs := make([]float64, n)
	for i := range n {
		rs[i] = va[i] / vb[i]
	}
	fmt.Printf("| %s / %s | %s | %.2f | %.2f–%.2f |\n", na, nb, unit, median(rs), slices.Min(rs), slices.Max(rs))
	return nil
}

func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
