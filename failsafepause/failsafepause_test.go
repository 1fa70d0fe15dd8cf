package failsafepause_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/failsafepause"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
)

// vendor answers its first request with the given header and 429, then
// 200, and records when each request arrived.
type vendor struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []time.Time
}

func newVendor(t *testing.T, throttle http.Header) *vendor {
	v := &vendor{}
	// A path of this test's own: a request another test sends to a port
	// the kernel reused is not counted as this vendor's first.
	path := "/" + strings.NewReplacer("/", "-").Replace(t.Name())
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		v.mu.Lock()
		v.arrivals = append(v.arrivals, time.Now())
		first := len(v.arrivals) == 1
		v.mu.Unlock()
		if first {
			for k, vs := range throttle {
				w.Header()[k] = vs
			}
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	v.URL += path
	t.Cleanup(v.Close)
	return v
}

func (v *vendor) times() []time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]time.Time(nil), v.arrivals...)
}

func pauses(t *testing.T) *pause.Pauses {
	t.Helper()
	l, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ps, err := pause.New(l)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func client(ps *pause.Pauses, opts ...failsafepause.Option) *http.Client {
	policy := failsafepause.NewRetryPolicyBuilder(ps, opts...).WithMaxRetries(3).Build()
	tr := failsafepause.Transport(ps, nil, pause.WithAPIName(func(*http.Request) string { return "vendor" }))
	return &http.Client{Transport: failsafehttp.NewRoundTripper(tr, policy)}
}

// TestFullHintsInsideTheRetryLoop: a hint that failsafehttp's own
// delay cannot read (decimal seconds in X-RateLimit-Reset-After) is
// waited exactly, inside its retry policy.
func TestFullHintsInsideTheRetryLoop(t *testing.T) {
	t.Parallel()
	v := newVendor(t, http.Header{"X-Ratelimit-Reset-After": {"0.6"}})
	resp, err := client(pauses(t)).Get(v.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	at := v.times()
	if resp.StatusCode != 200 || len(at) != 2 {
		t.Fatalf("%d after %d requests, want 200 after 2", resp.StatusCode, len(at))
	}
	if gap := at[1].Sub(at[0]); gap < 550*time.Millisecond || gap > 3*time.Second {
		t.Fatalf("retried %s after the 429, want the hint's 0.6 s", gap)
	}
}

// TestAPauseIsSharedByEveryClient: one client's 429 pauses the API for
// another client on the same store: its call is not sent during the pause,
// and goes out once the pause is over.
func TestAPauseIsSharedByEveryClient(t *testing.T) {
	t.Parallel()
	ps := pauses(t)
	v := newVendor(t, http.Header{"Retry-After": {"1"}})
	resp, err := client(ps, failsafepause.WithMaxWait(0)).Get(v.URL) // gives up at once, leaving the pause
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("first client: %d, want the 429 handed back", resp.StatusCode)
	}
	start := time.Now()
	resp, err = client(ps).Get(v.URL) // another worker, same API
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	at := v.times()
	if resp.StatusCode != 200 || len(at) != 2 {
		t.Fatalf("second client: %d after %d requests at the vendor, want 200 after 2", resp.StatusCode, len(at))
	}
	if gap := at[1].Sub(at[0]); gap < 950*time.Millisecond {
		t.Fatalf("the second client's call reached the vendor %s after the 429, inside its pause of 1 s", gap)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the second client took %s", took)
	}
}

// TestLongWaitsAreHandedBack: a throttled wait longer than MaxWait is not
// slept through in the process: the 429 comes back at once, for a queue to
// release the job.
func TestLongWaitsAreHandedBack(t *testing.T) {
	t.Parallel()
	v := newVendor(t, http.Header{"Retry-After": {"120"}})
	start := time.Now()
	resp, err := client(pauses(t)).Get(v.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || len(v.times()) != 1 || time.Since(start) > 2*time.Second {
		t.Fatalf("%d after %d requests and %s; want the 429 at once", resp.StatusCode, len(v.times()), time.Since(start))
	}
}
