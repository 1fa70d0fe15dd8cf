// Package jobtest holds the assertions the job-queue adapters' tests share
// (riverlimit, asynqlimit): a worker killed mid-job frees its slot within the
// TTL and not before; pauses shared across workers and processes spend no
// attempt. Each adapter supplies what is its queue's own — starting workers,
// enqueueing, reading attempt counts — and calls these.
package jobtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/pause"
)

// CrashTTL is the slot TTL of the crash tests: long enough that a loaded
// machine renews in time, short enough that the test waits little.
const CrashTTL = 2 * time.Second

// CrashRule is the rule of the crash tests: one job at a time, key "crash".
func CrashRule() joblimit.Rule {
	return joblimit.MustRule("crash", keycap.Spec{Max: 1, TTL: CrashTTL})
}

// CheckKilledWorkerFreesSlot checks a job of the given kind, running under
// CrashRule in a helper process on store's namespace: its slot is held while
// it runs, still held past twice the TTL (the worker renews it), and freed
// within the TTL of kill — not later — though nobody released it.
func CheckKilledWorkerFreesSlot(t *testing.T, store keycap.Store, kind string, kill func()) {
	t.Helper()
	ctx := context.Background()
	probe, err := keycap.NewLimiter(store)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	slot := keycap.Spec{Name: "job:" + kind, Max: 1, Family: keycap.FamilyJob}.For("crash")
	if _, err := probe.Acquire(ctx, slot); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("while the job runs its slot should be held: %v", err)
	}
	time.Sleep(2*CrashTTL + CrashTTL/8) // the job outlives its slot's TTL: time passing is the test
	if _, err := probe.Acquire(ctx, slot); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("after twice the TTL the running job's slot should still be held: %v", err)
	}
	kill()
	killed := time.Now()
	for {
		lease, err := probe.Acquire(ctx, slot)
		if err == nil {
			lease.Release()
			break
		}
		if time.Since(killed) > CrashTTL+time.Second {
			t.Fatalf("slot still held %s after the worker died (TTL %s)", time.Since(killed), CrashTTL)
		}
		time.Sleep(20 * time.Millisecond) // expiry is time passing: nothing to wait on but time
	}
	freed := time.Since(killed)
	t.Logf("slot freed %s after the kill (TTL %s)", freed.Round(time.Millisecond), CrashTTL)
	if freed > CrashTTL+200*time.Millisecond {
		t.Errorf("slot freed %s after the kill, later than its TTL of %s", freed, CrashTTL)
	}
}

// Vendor is the API the pause tests call: "vendor".
const Vendor = "vendor"

// VendorPauses returns Pauses on store and an HTTP client whose transport
// respects them. Releases are exercised: nothing waits in place.
func VendorPauses(store keycap.Store) (*pause.Pauses, *http.Client, error) {
	// A Limiter that only makes store calls (no leases) starts no
	// goroutine: nothing to close.
	l, err := keycap.NewLimiter(store)
	if err != nil {
		return nil, nil, err
	}
	ps, err := pause.New(l, pause.WithJitter(300*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	tr := ps.Transport(nil, pause.WithAPIName(func(*http.Request) string { return Vendor }), pause.WithMaxWaitInPlace(0))
	return ps, &http.Client{Transport: tr}, nil
}

// CallVendor is the work of a pause test's job: one call to url. A
// throttled answer returns ps.Check's error, for the adapter to pause the
// API and put the job back.
func CallVendor(ctx context.Context, hc *http.Client, ps *pause.Pauses, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := ps.Check(resp); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("vendor answered %d", resp.StatusCode)
	}
	return nil
}

// EnqueueStaggered enqueues one job, waits until the vendor throttled it and
// the pause is in the store, then enqueues two more: all three meet the
// pause.
func EnqueueStaggered(t *testing.T, v *testkit.Vendor, ps *pause.Pauses, enqueue func()) {
	t.Helper()
	enqueue()
	v.WaitRequests(t, 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if left, err := ps.Paused(context.Background(), Vendor); err == nil && left > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the vendor's 429 never became a pause")
		}
		time.Sleep(time.Millisecond) // the 429 is being recorded
	}
	enqueue()
	enqueue()
}

// AwaitDone reads "done <job> <attempts>" lines from worker processes until
// n jobs are done, and checks that each one's attempts field is want: the
// pause spent none.
func AwaitDone(t *testing.T, helpers []*testkit.Helper, n int, want string) {
	t.Helper()
	lines := make(chan string)
	stop := make(chan struct{})
	defer close(stop)
	for _, h := range helpers {
		go func() {
			for {
				select {
				case l, ok := <-h.Lines():
					if !ok {
						return
					}
					select {
					case lines <- l:
					case <-stop:
						return
					}
				case <-stop:
					return
				}
			}
		}()
	}
	timeout := time.After(time.Minute)
	for done := 0; done < n; {
		var line string
		select {
		case line = <-lines:
		case <-timeout:
			t.Fatalf("%d of %d jobs succeeded", done, n)
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "done" {
			continue
		}
		done++
		if f[2] != want {
			t.Errorf("job %s succeeded with %s attempts counted, want %s: the pause spent one", f[1], f[2], want)
		}
	}
}

// CheckLightBeforeFlood checks a run of a queue's fairness test: finish
// times, per customer, of a flood (customer 0) queued before a light
// customer (customer 1), with a parent (fair) and as one total (line).
// With the parent, the light customer's last job ends before the flood's
// median; the line's figures are logged beside, for comparison.
func CheckLightBeforeFlood(t *testing.T, fair, line map[int][]time.Duration) {
	t.Helper()
	lastLight := func(m map[int][]time.Duration) time.Duration { return slices.Max(m[1]) }
	medianFlood := func(m map[int][]time.Duration) time.Duration {
		s := slices.Sorted(slices.Values(m[0]))
		return s[len(s)/2]
	}
	t.Logf("parent: the light customer's last job at %s, the flood's median at %s, its last at %s", lastLight(fair), medianFlood(fair), slices.Max(fair[0]))
	t.Logf("one total: the light customer's last job at %s, the flood's median at %s, its last at %s", lastLight(line), medianFlood(line), slices.Max(line[0]))
	if lastLight(fair) > medianFlood(fair) {
		t.Errorf("with a parent, the light customer finished at %s, after half the flood (%s)", lastLight(fair), medianFlood(fair))
	}
}
