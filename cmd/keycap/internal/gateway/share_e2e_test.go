package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
)

// TestParentSharedFairlyAcrossTwoGateways: two gateways on one Redis, a
// parent of 4 slots, a tenant flooding it with 20 waiting requests and a
// light tenant with one at a time. The total upstream never passes 4, the
// flooder borrows the idle slots, and the light tenant, below its share, is
// handed the next slot that frees: it waits about one request's length,
// never behind the flood.
func TestParentSharedFairlyAcrossTwoGateways(t *testing.T) {
	t.Parallel()
	const work = 50 * time.Millisecond
	conc := testkit.NewConcurrency()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := r.Header.Get("X-Tenant")
		conc.Enter("total")
		conc.Enter(tenant)
		time.Sleep(work) // the work
		conc.Leave(tenant)
		conc.Leave("total")
	}))
	defer up.Close()
	prefix := testenv.Prefix(t, testenv.Redis(t))
	config := fmt.Sprintf(`upstream: %s
store: {type: redis, url: "redis://%s", prefix: "%s", budget: 10s}
parents:
  - {name: all, max: 4}
routes:
  - name: api
    path: /
    limits:
      - {max: 4, key: "header:X-Tenant", parent: all, wait: 10s, shares: {light: 2}}
`, up.URL, testenv.RedisAddr(), prefix)
	gws := []*gw{startGateway(t, config), startGateway(t, config)}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	call := func(g *gw, tenant string) (int, time.Duration) {
		req, _ := http.NewRequest(http.MethodGet, g.proxy+"/x", nil)
		req.Header.Set("X-Tenant", tenant)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return 0, 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	stop := make(chan struct{})
	var flooded atomic.Int64
	var floodMu sync.Mutex
	var floodTimes []time.Duration
	var wg sync.WaitGroup
	var stopOnce sync.Once
	end := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer end() // also when the test fails: the flood stops before the gateways do
	for c := range 20 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if code, d := call(gws[c%2], "flood"); code == 200 {
					flooded.Add(1)
					floodMu.Lock()
					floodTimes = append(floodTimes, d)
					floodMu.Unlock()
				}
			}
		})
	}
	// Let the flood fill the parent, then the light tenant comes, 20 times.
	testkit.WaitUntil(t, 10*time.Second, "the flood to fill the parent", func() bool { return conc.Peaks()["total"] == 4 })
	var waits []time.Duration
	for i := range 20 {
		code, d := call(gws[i%2], "light")
		if code != 200 {
			t.Errorf("light request %d: status %d", i, code)
		}
		waits = append(waits, d)
	}
	end()
	slices.Sort(waits)
	slices.Sort(floodTimes)
	p50, worst := waits[len(waits)/2], waits[len(waits)-1]
	floodP50 := floodTimes[len(floodTimes)/2]
	t.Logf("light tenant: p50 %s, worst %s; the flood's p50 %s (request length %s); flood served %d", p50, worst, floodP50, work, flooded.Load())
	peaks := conc.Peaks()
	if peaks["total"] > 4 || peaks["flood"] > 4 {
		t.Errorf("in flight upstream: %d in total, %d of the flood; caps 4 and 4", peaks["total"], peaks["flood"])
	}
	// The light tenant is served at once or when one request of the flood
	// ends: one or two request lengths; the flood's requests wait for four
	// of theirs in line first, about five. In one line both would take as
	// long. Compared in the same run, so that a loaded machine slows both.
	if p50 > floodP50/2 {
		t.Errorf("light tenant's median %s against the flood's %s: it waited behind the flood (a request is %s)", p50, floodP50, work)
	}
}

// TestWeightsOfRoutesSharingAPool: a full export of weight 3 and a read of
// weight 1 share a user's 4 slots.
func TestWeightsOfRoutesSharingAPool(t *testing.T) {
	t.Parallel()
	release := testkit.NewGate()
	entered := make(chan struct{}, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/full" {
			entered <- struct{}{}
			release.Wait(15 * time.Second)
		}
	}))
	defer up.Close()
	defer release.Open() // before up.Close: a failed test leaves no handler blocked
	g := startGateway(t, fmt.Sprintf(`upstream: %s
routes:
  - name: full
    path: /full
    pool: user
    limits: [{max: 4, key: "header:X-User", weight: 3}]
  - name: read
    path: /read
    pool: user
    limits: [{max: 4, key: "header:X-User"}]
`, up.URL))
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, g.proxy+"/full", nil)
		req.Header.Set("X-User", "ann")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	wait(t, entered, "the full export to reach the upstream")
	if code, _, _ := get(t, g.proxy+"/read", "X-User", "ann"); code != 200 {
		t.Fatalf("a read beside an export of weight 3 of 4: %d", code)
	}
	if code, _, _ := get(t, g.proxy+"/full", "X-User", "ann"); code != 429 {
		t.Fatalf("a second export of weight 3: %d, want 429", code)
	}
	release.Open()
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("the export: %d", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the export did not end")
	}
}
