package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/redisstore"
)

// The outbound case of issue 30: workers on two processes call a vendor whose
// concurrency limit is hidden, through pause.Transports capped by one
// adaptive total on Redis.
const (
	vendorCap     = 20 // the vendor's hidden limit
	vendorWork    = 20 * time.Millisecond
	outboundStart = 4                      // the total's first guess
	outboundCalls = 40                     // calls at once per process
	outboundTick  = 100 * time.Millisecond // the adaptive interval
)

// vendorStub answers 429 at once (Retry-After: 0, as an API limiting
// concurrency rather than a rate) past vendorCap calls in flight.
type vendorStub struct {
	inflight, ok, refused, max atomic.Int64
}

func (v *vendorStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := v.inflight.Add(1)
	defer v.inflight.Add(-1)
	if n > vendorCap {
		v.refused.Add(1)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	for m := v.max.Load(); n > m && !v.max.CompareAndSwap(m, n); m = v.max.Load() {
	}
	v.ok.Add(1)
	time.Sleep(vendorWork) // the vendor's work: time
}

func outboundParent() *keycap.Parent {
	return keycap.MustParent("vendor", outboundStart, keycap.WithAdaptive(keycap.Adaptive{Floor: 1, Ceiling: 100, Interval: outboundTick, OverloadsOnly: true}))
}

// outboundWorker is one process of TestOutboundConcurrencyAcrossProcesses: it
// prints "ready", runs its calls from "go" until its standard input closes,
// and prints "total N" for each change of the total it sees.
func outboundWorker() {
	s, err := redisstore.New(redis.NewClient(testenv.RedisOptions()), redisstore.WithPrefix(os.Getenv("KEYCAP_OUT_PREFIX")))
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex // one line at a time on stdout
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", a...)
	}
	obs := keycap.ObserverFunc(func(e keycap.Event) {
		if e.Kind == keycap.TotalChanged {
			say("total %d %s", e.Tuning.Total, e.Tuning.Reason)
		}
	})
	l, err := keycap.NewLimiter(s, keycap.WithNode(os.Getenv("KEYCAP_OUT_NODE")), keycap.WithObserver(obs), keycap.WithDecisionBudget(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ps, err := pause.New(l)
	if err != nil {
		panic(err)
	}
	spec := keycap.Spec{Name: "vendor-calls", Max: 100, Parent: outboundParent(), Wait: 10 * time.Second}
	client := &http.Client{Transport: ps.Transport(nil, pause.WithConcurrency(func(api string) (keycap.Limit, bool) {
		return spec.For(api), true
	}))}
	say("ready")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // the test closes stdin (or dies): stop
		for in.Scan() {
		}
		cancel()
	}()
	url := os.Getenv("KEYCAP_OUT_URL")
	var wg sync.WaitGroup
	for range outboundCalls {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, keycap.ErrLimitExceeded) {
						fmt.Fprintln(os.Stderr, "outbound-worker:", err)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

// TestOutboundConcurrencyAcrossProcesses: two processes, 40 calls at once
// each, call a vendor whose hidden limit is 20 through Transports capped by
// one adaptive total on Redis, starting at 4. The total finds the limit (18
// or more within 20 s; the aim is 10 s), and in the steady state
// that follows few calls meet the vendor's 429 (the aim: under 1 %).
func TestOutboundConcurrencyAcrossProcesses(t *testing.T) {
	c := testenv.Redis(t)
	prefix := testenv.Prefix(t, c)
	v := &vendorStub{}
	srv := httptest.NewServer(v)
	defer srv.Close()

	var helpers []*testkit.Helper
	for _, node := range []string{"a", "b"} {
		helpers = append(helpers, testkit.StartHelper(t, "outbound-worker", "ready",
			"KEYCAP_OUT_PREFIX="+prefix, "KEYCAP_OUT_URL="+srv.URL, "KEYCAP_OUT_NODE="+node))
	}
	var total atomic.Int64 // the last total either process saw
	total.Store(outboundStart)
	var mu sync.Mutex
	var changes []string // the totals in the steady state, with their reasons
	var steady atomic.Bool
	var wg sync.WaitGroup
	for _, h := range helpers {
		wg.Go(func() {
			for l := range h.Lines() {
				if f := strings.Fields(l); len(f) >= 2 && f[0] == "total" {
					n, _ := strconv.Atoi(f[1])
					total.Store(int64(n))
					if steady.Load() {
						mu.Lock()
						changes = append(changes, strings.Join(f[1:], " "))
						mu.Unlock()
					}
				}
			}
		})
	}
	start := time.Now()
	for _, h := range helpers {
		h.Send("go")
	}
	defer func() { // stop the helpers and the readers whatever happened
		for _, h := range helpers {
			h.Kill()
		}
		wg.Wait()
	}()

	testkit.WaitUntil(t, 20*time.Second, "the total to reach 18", func() bool { return total.Load() >= vendorCap-2 })
	settled := time.Since(start)
	// The steady state: 5 s (50 intervals) counted at the vendor.
	ok0, refused0 := v.ok.Load(), v.refused.Load()
	lo, hi := total.Load(), total.Load()
	steady.Store(true)
	var samples, inflight int64
	window := time.NewTimer(5 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-window.C:
			done = true
		case <-tick.C:
			lo, hi = min(lo, total.Load()), max(hi, total.Load())
			samples++
			inflight += v.inflight.Load()
		}
	}
	ok, refused := v.ok.Load()-ok0, v.refused.Load()-refused0
	share := float64(refused) / float64(max(1, ok+refused))
	t.Logf("total %d after %s; steady state: total %d–%d, in flight at the vendor %.1f on average, %d calls served, %d refused (%.2f %%)",
		vendorCap-2, settled.Round(time.Millisecond), lo, hi, float64(inflight)/float64(samples), ok, refused, 100*share)
	mu.Lock()
	t.Logf("the total's changes in the steady state: %s", strings.Join(changes, ", "))
	mu.Unlock()
	if ok == 0 {
		t.Fatal("no call served in the steady state")
	}
	// The aim is under 1 % (measured 0.2–0.9 % under -race); the
	// bound leaves room for a loaded machine, not for a total that never
	// learns the limit (40 % and more would meet it).
	if share > 0.02 {
		t.Errorf("%.2f %% of the calls met the vendor's limit in the steady state, want under 2 %%", 100*share)
	}
}
