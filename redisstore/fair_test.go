package redisstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
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
	if err := json.Unmarshal([]byte(os.Getenv("KEYCAP_FAIR_TENANTS")), &tenants); err != nil {
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
	ctx, cancel := context.WithTimeout(context.Background(), c.For+15*time.Second)
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
func fairAcrossProcesses(t testing.TB, mode string, tenants []fairtest.Tenant, processes int, job, d time.Duration) fairtest.Report {
	c := testenv.Redis(t)
	prefix := testenv.Prefix(t, c)
	cfg := fairtest.Config{Mode: mode, Name: "fair", Total: 20, Job: job, For: d}
	cj, _ := json.Marshal(cfg)
	var helpers []*testkit.Helper
	for p := range processes {
		var part []fairtest.Tenant // callers dealt out over the processes
		for _, tn := range tenants {
			n := tn.Callers / processes
			if p < tn.Callers%processes {
				n++
			}
			if n > 0 {
				part = append(part, fairtest.Tenant{Name: tn.Name, Callers: n})
			}
		}
		tj, _ := json.Marshal(part)
		helpers = append(helpers, testkit.StartHelper(t, "fair-worker", "ready",
			"KEYCAP_FAIR_CONFIG="+string(cj), "KEYCAP_FAIR_TENANTS="+string(tj), "KEYCAP_FAIR_PREFIX="+prefix))
	}
	start := time.Now().Add(200 * time.Millisecond)
	for _, h := range helpers {
		h.Send("go " + strconv.FormatInt(start.UnixNano(), 10))
	}
	var parts []map[string]*fairtest.Tally
	for i, h := range helpers {
		line, ok := h.WaitLine("result ", d+20*time.Second)
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
	fair := fairAcrossProcesses(t, fairtest.Parents, fairtest.Workload, 2, job, 3*time.Second)
	t.Logf("\n%s", fair)
	fairtest.Check(t, fair, 20, job, "flood", "light-a", "light-b")
}

// BenchmarkFairnessAcrossProcesses: the workload over two
// processes on one Redis, per mode.
func BenchmarkFairnessAcrossProcesses(b *testing.B) {
	fairtest.Bench(b, func(b *testing.B, mode string, ts []fairtest.Tenant, job, d time.Duration) fairtest.Report {
		return fairAcrossProcesses(b, mode, ts, 2, job, d)
	})
}
