package fairtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/fairtest"
	"github.com/keycap/keycap/memstore"
)

func run(t testing.TB, c fairtest.Config, ts []fairtest.Tenant) fairtest.Report {
	l, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c.Name = fmt.Sprintf("fair:%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), c.Warmup+c.Job+c.For+15*time.Second) // a run that stalls fails in seconds
	defer cancel()
	start := time.Now().Add(10 * time.Millisecond)
	tallies, err := fairtest.Run(ctx, l, c, ts, start)
	if err != nil {
		t.Fatal(err)
	}
	return fairtest.Analyse(c, ts, start, tallies)
}

// TestParentsShareFairly: with parents, the light tenants get their
// demand whatever the flood and do not wait behind it (fairtest.Check);
// with a plain cap on the total, they wait in its one line behind the
// flood, which the same measures see.
func TestParentsShareFairly(t *testing.T) {
	const job = 50 * time.Millisecond
	fair := run(t, fairtest.Config{Mode: fairtest.Parents, Total: 20, Job: job, For: 2 * time.Second}, fairtest.Workload)
	fifo := run(t, fairtest.Config{Mode: fairtest.OneLine, Total: 20, Job: job, For: 2 * time.Second}, fairtest.Workload)
	t.Logf("\n%s%s", fair, fifo)
	fairtest.Check(t, fair, 20, job, "flood", "light-a", "light-b")
	if fifo.Peak > 20 {
		t.Errorf("%d slots at once in one line: above the total of 20", fifo.Peak)
	}
	if fifo.Jain >= fair.Jain {
		t.Errorf("Jain's index with one line %.3f, not below the parent's %.3f: the measure sees no difference", fifo.Jain, fair.Jain)
	}
}

// BenchmarkFairness reports, per mode, Jain's index and the light
// tenants' p99 wait, on memstore (one process; redisstore's runs the same
// over several processes).
func BenchmarkFairness(b *testing.B) {
	fairtest.Bench(b, func(b *testing.B, c fairtest.Config, ts []fairtest.Tenant) fairtest.Report { return run(b, c, ts) })
}

// BenchmarkManyTenants: a parent of 20 shared by one flooding tenant and
// 10 to 20,000 tenants of one caller each, against one plain pool of 20,
// on memstore.
func BenchmarkManyTenants(b *testing.B) {
	fairtest.BenchMany(b, 0, func(b *testing.B, c fairtest.Config, ts []fairtest.Tenant) fairtest.Report { return run(b, c, ts) }, nil)
}

// BenchmarkUnequalJobs: jobs of 200 ms and of 10 ms under a parent of 10,
// on memstore: each tenant's share of the slot-time.
func BenchmarkUnequalJobs(b *testing.B) {
	fairtest.BenchUnequal(b, func(b *testing.B, c fairtest.Config, ts []fairtest.Tenant) fairtest.Report { return run(b, c, ts) })
}
