package testkit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Vendor is a test API that answers its first request with 429 and a
// Retry-After, and every later one with 200, and records when each request
// arrived.
type Vendor struct {
	*httptest.Server
	RetryAfter time.Duration
	mu         sync.Mutex
	arrivals   []time.Time
	requested  chan struct{}
}

// NewVendor starts a Vendor whose 429 says Retry-After: retryAfter (whole
// seconds), closed when t ends.
func NewVendor(t testing.TB, retryAfter time.Duration) *Vendor {
	v := &Vendor{RetryAfter: retryAfter, requested: make(chan struct{}, 1000)}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.mu.Lock()
		v.arrivals = append(v.arrivals, time.Now())
		first := len(v.arrivals) == 1
		v.mu.Unlock()
		v.requested <- struct{}{}
		if first {
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(v.Close)
	return v
}

// WaitRequests waits until the vendor has had n requests.
func (v *Vendor) WaitRequests(t testing.TB, n int) {
	t.Helper()
	for {
		v.mu.Lock()
		got := len(v.arrivals)
		v.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-v.requested:
		case <-time.After(time.Minute):
			t.Fatalf("the vendor had %d requests, want %d", got, n)
		}
	}
}

// CheckPauseHeld checks that the vendor had exactly 1+successes requests:
// the first, throttled, and then none until its Retry-After had passed.
func (v *Vendor) CheckPauseHeld(t testing.TB, successes int) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.arrivals) != 1+successes {
		t.Fatalf("the vendor had %d requests, want exactly %d: one throttled, then one per job", len(v.arrivals), 1+successes)
	}
	first := v.arrivals[0]
	for i, a := range v.arrivals[1:] {
		// Redis keeps the pause to the millisecond; the pause starts once the
		// 429 is read, after it was sent.
		if a.Sub(first) < v.RetryAfter-5*time.Millisecond {
			t.Errorf("request %d arrived %s after the 429, inside its Retry-After of %s", i+2, a.Sub(first), v.RetryAfter)
		}
	}
}
