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

func run(t testing.TB, mode string, ts []fairtest.Tenant, job, d time.Duration) fairtest.Report {
	l, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := fairtest.Config{Mode: mode, Name: fmt.Sprintf("fair:%d", time.Now().UnixNano()), Total: 20, Job: job, For: d}
	ctx, cancel := context.WithTimeout(context.Background(), d+15*time.Second) // a run that stalls fails in seconds
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
	fair := run(t, fairtest.Parents, fairtest.Workload, job, 2*time.Second)
	fifo := run(t, fairtest.OneLine, fairtest.Workload, job, 2*time.Second)
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
	fairtest.Bench(b, func(b *testing.B, mode string, ts []fairtest.Tenant, job, d time.Duration) fairtest.Report {
		return run(b, mode, ts, job, d)
	})
}
