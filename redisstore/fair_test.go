package redisstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/fairtest"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/redisstore"
)

// fairWorker is one process of a fairness run: it runs its part of the
// tenants' callers from the time it is sent, and prints its tallies.
func fairWorker() {
	var c fairtest.Config
	var tenants []fairtest.Tenant
	if err := json.Unmarshal([]byte(os.Getenv("KEYCAP_FAIR_CONFIG")), &c); err != nil {
		panic(err)
	}
	tj, err := os.ReadFile(os.Getenv("KEYCAP_FAIR_TENANTS")) // a file: 20,000 tenants outgrow an environment variable
	if err != nil {
		panic(err)
	}
	if err := json.Unmarshal(tj, &tenants); err != nil {
		panic(err)
	}
	s, err := redisstore.New(redis.NewClient(testenv.RedisOptions()), redisstore.WithPrefix(os.Getenv("KEYCAP_FAIR_PREFIX")))
	if err != nil {
		panic(err)
	}
	// A budget well above a loaded machine's worst: the run measures
	// fairness, not the fail mode.
	l, err := keycap.NewLimiter(s, keycap.WithDecisionBudget(10*time.Second), keycap.WithDefaultFailMode(keycap.FailClosed))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return
	}
	ns, err := strconv.ParseInt(strings.TrimPrefix(in.Text(), "go "), 10, 64)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Warmup+c.Job+c.For+15*time.Second)
	defer cancel()
	tallies, err := fairtest.Run(ctx, l, c, tenants, time.Unix(0, ns))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fair-worker:", err)
		fmt.Println("result error")
		return
	}
	out, _ := json.Marshal(tallies)
	fmt.Println("result " + string(out))
}

// fairAcrossProcesses runs tenants under mode on Redis, split over
// processes helper processes, and reports the run.
func fairAcrossProcesses(t testing.TB, cfg fairtest.Config, tenants []fairtest.Tenant, processes int) fairtest.Report {
	c := testenv.Redis(t)
	prefix := testenv.Prefix(t, c)
	cfg.Name = "fair"
	cj, _ := json.Marshal(cfg)
	var helpers []*testkit.Helper
	for p := range processes {
		var part []fairtest.Tenant // callers dealt out over the processes
		for i, tn := range tenants {
			n := tn.Callers / processes
			if (p+i)%processes < tn.Callers%processes {
				n++
			}
			if n > 0 {
				part = append(part, fairtest.Tenant{Name: tn.Name, Callers: n, Job: tn.Job})
			}
		}
		tj, _ := json.Marshal(part)
		file := filepath.Join(t.TempDir(), "tenants.json")
		if err := os.WriteFile(file, tj, 0o600); err != nil {
			t.Fatal(err)
		}
		helpers = append(helpers, testkit.StartHelper(t, "fair-worker", "ready",
			"KEYCAP_FAIR_CONFIG="+string(cj), "KEYCAP_FAIR_TENANTS="+file, "KEYCAP_FAIR_PREFIX="+prefix))
	}
	start := time.Now().Add(200 * time.Millisecond)
	for _, h := range helpers {
		h.Send("go " + strconv.FormatInt(start.UnixNano(), 10))
	}
	var parts []map[string]*fairtest.Tally
	for i, h := range helpers {
		line, ok := h.WaitLine("result ", cfg.Warmup+cfg.Job+cfg.For+20*time.Second)
		if !ok {
			t.Fatalf("process %d of the run gave no result", i)
		}
		if line == "result error" {
			t.Fatalf("process %d of the run failed (its error is above)", i)
		}
		var m map[string]*fairtest.Tally
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "result ")), &m); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, m)
	}
	return fairtest.Analyse(cfg, tenants, start, fairtest.Merge(parts...))
}

// TestFairnessAcrossProcesses: the workload over two processes on
// one Redis: the parent's total holds, the shares are fair, and the light
// tenants do not wait behind the flood (fairtest.Check).
func TestFairnessAcrossProcesses(t *testing.T) {
	const job = 50 * time.Millisecond
	fair := fairAcrossProcesses(t, fairtest.Config{Mode: fairtest.Parents, Total: 20, Job: job, For: 3 * time.Second}, fairtest.Workload, 2)
	t.Logf("\n%s", fair)
	fairtest.Check(t, fair, 20, job, "flood", "light-a", "light-b")
}

// BenchmarkFairnessAcrossProcesses: the workload over two
// processes on one Redis, per mode.
func BenchmarkFairnessAcrossProcesses(b *testing.B) {
	fairtest.Bench(b, func(b *testing.B, c fairtest.Config, ts []fairtest.Tenant) fairtest.Report {
		return fairAcrossProcesses(b, c, ts, 2)
	})
}

// BenchmarkUnequalJobsAcrossProcesses: jobs of 200 ms and of 10 ms under
// a parent of 10, over two processes on one Redis: each tenant's share of
// the slot-time.
func BenchmarkUnequalJobsAcrossProcesses(b *testing.B) {
	fairtest.BenchUnequal(b, func(b *testing.B, c fairtest.Config, ts []fairtest.Tenant) fairtest.Report {
		return fairAcrossProcesses(b, c, ts, 2)
	})
}

// BenchmarkManyTenantsAcrossProcesses: a parent of 20 shared by one
// flooding tenant and 10 to 2,000 tenants of one caller each (20,000 with
// KEYCAP_MANY_MAX=20000), against one plain pool of 20, over two processes
// on one Redis; with Redis's own count of script calls and their time
// (INFO commandstats) per grant.
func BenchmarkManyTenantsAcrossProcesses(b *testing.B) {
	limit := 2000
	if v, err := strconv.Atoi(os.Getenv("KEYCAP_MANY_MAX")); err == nil {
		limit = v
	}
	c := testenv.Redis(b)
	var before scriptStats
	var last fairtest.Report
	fairtest.BenchMany(b, limit, func(b *testing.B, c fairtest.Config, ts []fairtest.Tenant) fairtest.Report {
		last = fairAcrossProcesses(b, c, ts, 2)
		return last
	}, func(b *testing.B, mode string, done bool) {
		st := readScriptStats(b, c)
		if !done {
			before = st
			return
		}
		grants := last.Grants() * last.For.Seconds()
		calls, usec := float64(st.calls-before.calls), float64(st.usec-before.usec)
		b.ReportMetric(calls/grants, mode+"-scripts/grant")
		b.ReportMetric(usec/calls, mode+"-µs/script")
		b.ReportMetric(usec/grants, mode+"-µs/grant")
	})
}

// scriptStats is Redis's count of EVALSHA and FCALL calls and their time.
type scriptStats struct{ calls, usec int64 }

func readScriptStats(b *testing.B, c *redis.Client) scriptStats {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var st scriptStats
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			rest, ok = strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:")
		}
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls += n
			case "usec":
				st.usec += n
			}
		}
	}
	return st
}
