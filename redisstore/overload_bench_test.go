package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/redisstore"
)

// busyLoad is the "busy" helper: KEYCAP_BUSY threads that never block,
// until it is killed.
func busyLoad() {
	n, _ := strconv.Atoi(os.Getenv("KEYCAP_BUSY"))
	runtime.GOMAXPROCS(n)
	for range n {
		go func() {
			for x := uint64(1); x != 0; x++ { // 2⁶⁴ turns: until killed
			}
		}()
	}
	fmt.Println("ready")
	select {}
}

// BenchmarkDecisionUnderLoad times decisions — 8 goroutines, each an
// Acquire of a limit that does not wait and its release, in a loop, for
// KEYCAP_LOAD_SECONDS (default 30) — on one Redis and on the cluster, with
// the default budget, and reports their p50, p99, p99.9 and longest, and
// the decisions that ran out of budget as the Limiter told them: the
// store's failures (store-failed-calls; outages counts the StoreFailed
// reports) and the process's (overloaded-calls). The load, in another
// process:
//
//	none     nothing added
//	machine  12 threads that never block, anywhere: Redis, on the same
//	         cores, is starved too
//	process  48 such threads and this process, all on CPU 0 (taskset; this
//	         process with GOMAXPROCS 1, as Go starts on one CPU); Redis free
//	         to run on the others
//
// Run with -benchtime 1x: each sub-benchmark is one timed run.
func BenchmarkDecisionUnderLoad(b *testing.B) {
	secs, err := strconv.Atoi(os.Getenv("KEYCAP_LOAD_SECONDS"))
	if err != nil || secs <= 0 {
		secs = 30
	}
	for _, be := range backends {
		for _, load := range []string{"none", "machine", "process"} {
			b.Run(fmt.Sprintf("%s/load=%s", be.name, load), func(b *testing.B) {
				decideUnderLoad(b, be.client(b), load, time.Duration(secs)*time.Second)
			})
		}
	}
}

func decideUnderLoad(b *testing.B, c redis.UniversalClient, load string, d time.Duration) {
	s, err := redisstore.New(c, redisstore.WithPrefix(testenv.Prefix(b, c)))
	if err != nil {
		b.Fatal(err)
	}
	rec := &keycaptest.Recorder{}
	l, err := keycap.NewLimiter(s, keycap.WithObserver(rec), keycap.WithDefaultFailMode(keycap.FailClosed))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lims := make([]keycap.Limit, 30)
	for i := range lims {
		lims[i] = keycap.Spec{Name: "under-load", Max: 1000}.For(fmt.Sprint(i))
	}
	for deadline := time.Now().Add(time.Minute); ; { // warm: the library on every master, connections open
		failed := false
		for _, lim := range lims {
			ls, err := l.Acquire(ctx, lim)
			if err != nil {
				failed = true
				continue
			}
			ls.Release()
		}
		if !failed {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("decisions still fail after a minute of warming up")
		}
	}
	switch load {
	case "machine":
		testkit.StartHelper(b, "busy", "ready", "KEYCAP_BUSY=12")
	case "process":
		if _, err := exec.LookPath("taskset"); err != nil || runtime.NumCPU() < 2 {
			b.Skip("needs taskset and two CPUs")
		}
		h := testkit.StartHelper(b, "busy", "ready", "KEYCAP_BUSY=48")
		pin(b, h.Pid(), "1") // CPU 0
		mask := pin(b, os.Getpid(), "1")
		defer pin(b, os.Getpid(), mask)
		// As Go sets itself up in a process started on one CPU.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	rec.Reset()
	var (
		mu                   sync.Mutex
		lat                  []time.Duration
		storeCalls, ownCalls int // over budget: the store's, the process's
		wg                   sync.WaitGroup
		stopping             = time.Now().Add(d)
	)
	b.ResetTimer()
	for g := range 8 {
		wg.Go(func() {
			var mine []time.Duration
			store, own := 0, 0
			for i := g; time.Now().Before(stopping); i++ {
				start := time.Now()
				ls, err := l.Acquire(ctx, lims[i%len(lims)])
				mine = append(mine, time.Since(start))
				var be *keycap.BudgetError
				switch {
				case err == nil:
					ls.Release()
				case errors.As(err, &be) && be.Overloaded:
					own++
				case be != nil:
					store++
				default:
					b.Errorf("decision: %v", err)
					return
				}
				time.Sleep(time.Millisecond) // a caller's pace, not a flood
			}
			mu.Lock()
			lat, storeCalls, ownCalls = append(lat, mine...), storeCalls+store, ownCalls+own
			mu.Unlock()
		})
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(len(lat)), "decisions")
	b.ReportMetric(ms(pct(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(pct(lat, 0.99)), "p99-ms")
	b.ReportMetric(ms(pct(lat, 0.999)), "p99.9-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(float64(storeCalls), "store-failed-calls")
	b.ReportMetric(float64(ownCalls), "overloaded-calls")
	b.ReportMetric(float64(rec.Count(keycap.StoreFailed, "")), "outages")
}

// pin sets the CPUs of every thread of process pid to mask (taskset -a -p,
// a hexadecimal mask), and returns the mask they had.
func pin(b *testing.B, pid int, mask string) (was string) {
	b.Helper()
	out, err := exec.Command("taskset", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		b.Fatalf("taskset -p %d: %v", pid, err)
	}
	f := strings.Fields(string(out)) // "pid 123's current affinity mask: 3"
	was = f[len(f)-1]
	if out, err := exec.Command("taskset", "-a", "-p", mask, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		b.Fatalf("taskset -a -p %s %d: %v\n%s", mask, pid, err, out)
	}
	return was
}
