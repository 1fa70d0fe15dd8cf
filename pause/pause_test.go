package pause_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/jobtype"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/store"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

// vendor is a test API: it answers each request with the next scripted
// response (the last one repeats), and counts requests.
type vendor struct {
	*httptest.Server
	mu        sync.Mutex
	responses []func(w http.ResponseWriter)
	requests  atomic.Int32
	bodies    []string
}

func newVendor(t *testing.T, responses ...func(w http.ResponseWriter)) *vendor {
	v := &vendor{responses: responses}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(v.requests.Add(1))
		body, _ := io.ReadAll(r.Body)
		v.mu.Lock()
		v.bodies = append(v.bodies, string(body))
		respond := v.responses[min(n, len(v.responses))-1]
		v.mu.Unlock()
		respond(w)
	}))
	t.Cleanup(v.Close)
	return v
}

func throttle(headers ...string) func(w http.ResponseWriter) {
	return status(http.StatusTooManyRequests, `{"message":"slow down"}`, headers...)
}

func status(code int, body string, headers ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

var ok = status(http.StatusOK, "ok")

func newPauses(t *testing.T, store keycap.Store, opts ...pause.Option) (*pause.Pauses, *keycaptest.Recorder) {
	t.Helper()
	rec := &keycaptest.Recorder{}
	l, err := keycap.NewLimiter(store, keycap.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ps, err := pause.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ps, rec
}

func limiter(t *testing.T, store keycap.Store) *keycap.Limiter {
	t.Helper()
	l, err := keycap.NewLimiter(store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func client(ps *pause.Pauses, opts ...pause.TransportOption) *http.Client {
	return &http.Client{Transport: ps.Transport(nil, opts...)}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// plain declares no feature of the store it wraps.
type plain struct{ store.Store }

func (plain) Features() store.Features { return 0 }

func TestNewNeedsAStoreThatPauses(t *testing.T) {
	t.Parallel()
	if _, err := pause.New(limiter(t, plain{memstore.New()})); !errors.Is(err, keycap.ErrNotSupported) {
		t.Fatalf("a store without pauses: %v, want ErrNotSupported", err)
	}
	if _, err := pause.New(limiter(t, memstore.New()), pause.WithJitter(-1)); err == nil {
		t.Fatal("negative jitter accepted")
	}
}

func TestShortThrottleIsRetriedInPlace(t *testing.T) {
	t.Parallel()
	v := newVendor(t, throttle("Retry-After", "1"), ok)
	ps, rec := newPauses(t, memstore.New())
	start := time.Now()
	resp, body, err := get(t, client(ps), v.URL)
	if err != nil || resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("got %v %q %v, want the 200 after an in-place retry", resp, body, err)
	}
	if el := time.Since(start); el < time.Second {
		t.Fatalf("retried after %s, before the Retry-After of 1 s", el)
	}
	if n := v.requests.Load(); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
	if rec.Count(keycap.Throttled, "") != 1 || rec.Count(keycap.CallRetried, "") != 1 {
		t.Fatalf("events: %+v", rec.Events())
	}
}

func TestLongThrottleReturnsTheResponseAndPausesTheAPI(t *testing.T) {
	t.Parallel()
	v := newVendor(t, throttle("Retry-After", "30"), ok)
	ps, rec := newPauses(t, memstore.New())
	c := client(ps)
	resp, body, err := get(t, c, v.URL+"/a")
	if err != nil || resp.StatusCode != 429 || body != `{"message":"slow down"}` || resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("got %v %q %v, want the 429 untouched", resp, body, err)
	}
	// Every later request to the same API is refused without being sent.
	_, err = c.Get(v.URL + "/b")
	var pe *pause.PausedError
	if !errors.As(err, &pe) || !errors.Is(err, pause.ErrPaused) || pe.API != strings.TrimPrefix(v.URL, "http://") {
		t.Fatalf("second request: %v, want a *PausedError through the *url.Error", err)
	}
	if left := time.Until(pe.Until); left < 29*time.Second || left > 30*time.Second {
		t.Fatalf("resumes in %s, want about 30 s", left)
	}
	if n := v.requests.Load(); n != 1 {
		t.Fatalf("%d requests reached the API, want 1", n)
	}
	if rec.Count(keycap.CallHeld, "") != 1 {
		t.Fatal("refusal not reported")
	}
	// Another API is not paused.
	other := newVendor(t, ok)
	if resp, _, err := get(t, c, other.URL); err != nil || resp.StatusCode != 200 {
		t.Fatalf("another API: %v %v", resp, err)
	}
}

func TestAShorterThrottleNeverShortensAPause(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	ps, _ := newPauses(t, store)
	ctx := context.Background()
	if _, err := ps.Pause(ctx, "vendor", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Pause(ctx, "vendor", time.Second); err != nil {
		t.Fatal(err)
	}
	if left, _ := ps.Paused(ctx, "vendor"); left < 59*time.Second {
		t.Fatalf("paused %s after a shorter pause, want about a minute", left)
	}
}

func TestWhatIsSentAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		req    func(url string) *http.Request
		opts   []pause.TransportOption
		resent bool
		after  string // the Retry-After; "0" when empty
	}{
		{"POST", func(u string) *http.Request { r, _ := http.NewRequest("POST", u, strings.NewReader("x")); return r }, nil, false, ""},
		{"POST with an Idempotency-Key", func(u string) *http.Request {
			r, _ := http.NewRequest("POST", u, strings.NewReader("payload"))
			r.Header.Set("Idempotency-Key", "k1")
			return r
		}, nil, true, ""},
		{"POST, any method allowed", func(u string) *http.Request {
			r, _ := http.NewRequest("POST", u, strings.NewReader("payload"))
			return r
		}, []pause.TransportOption{pause.WithRetryAnyMethod()}, true, ""},
		{"PUT whose body cannot be replayed", func(u string) *http.Request {
			r, _ := http.NewRequest("PUT", u, io.NopCloser(strings.NewReader("x")))
			return r
		}, nil, false, ""},
		{"GET, waiting in place off", func(u string) *http.Request { r, _ := http.NewRequest("GET", u, nil); return r }, []pause.TransportOption{pause.WithMaxWaitInPlace(0)}, false, "1"},
		{"GET, no retries", func(u string) *http.Request { r, _ := http.NewRequest("GET", u, nil); return r }, []pause.TransportOption{pause.WithMaxRetries(0)}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			after := tc.after
			if after == "" {
				after = "0" // no waiting needed: the question is only whether it is resent
			}
			v := newVendor(t, throttle("Retry-After", after), ok)
			ps, _ := newPauses(t, memstore.New())
			resp, err := client(ps, tc.opts...).Do(tc.req(v.URL))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.StatusCode == 200; got != tc.resent {
				t.Fatalf("status %d after %d requests; resent: %v, want %v", resp.StatusCode, v.requests.Load(), got, tc.resent)
			}
			if tc.resent && v.bodies[1] != v.bodies[0] {
				t.Fatalf("the body was not replayed: %q then %q", v.bodies[0], v.bodies[1])
			}
		})
	}
}

func TestWaitMustFitTheDeadline(t *testing.T) {
	t.Parallel()
	v := newVendor(t, throttle("Retry-After", "3"), ok)
	ps, _ := newPauses(t, memstore.New())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", v.URL, nil)
	start := time.Now()
	resp, err := client(ps).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || time.Since(start) > 900*time.Millisecond {
		t.Fatalf("got %d after %s: a 3 s wait cannot fit a 1 s deadline, the 429 must come back at once", resp.StatusCode, time.Since(start))
	}
}

func TestWaitingInPlaceEndsWithTheContext(t *testing.T) {
	t.Parallel()
	v := newVendor(t, throttle("Retry-After", "4"), ok)
	ps, _ := newPauses(t, memstore.New())
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", v.URL, nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := client(ps).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	for v.requests.Load() == 0 {
		time.Sleep(time.Millisecond) // until the first request is in
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the wait in place did not end with the context")
	}
}

func TestPausedByAnotherServerWaitsInPlaceWhenShort(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	v := newVendor(t, ok)
	other, _ := newPauses(t, store) // another server, same store
	api := strings.TrimPrefix(v.URL, "http://")
	if _, err := other.Pause(context.Background(), api, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ps, _ := newPauses(t, store)
	start := time.Now()
	if resp, _, err := get(t, client(ps), v.URL); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Fatalf("sent after %s, inside the other server's pause", el)
	}
}

func TestExhaustedResponsePausesBeforeThe429(t *testing.T) {
	t.Parallel()
	v := newVendor(t, status(200, "ok", "RateLimit", `"default";r=0;t=40`), ok)
	ps, rec := newPauses(t, memstore.New())
	c := client(ps)
	if resp, body, err := get(t, c, v.URL); err != nil || resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%v %q %v", resp, body, err)
	}
	_, err := c.Get(v.URL)
	var pe *pause.PausedError
	if !errors.As(err, &pe) || time.Until(pe.Until) < 39*time.Second {
		t.Fatalf("after a response with nothing remaining: %v", err)
	}
	if v.requests.Load() != 1 || rec.Count(keycap.Exhausted, "") != 1 {
		t.Fatalf("%d requests, events %+v", v.requests.Load(), rec.Events())
	}
}

func TestHintInTheBody(t *testing.T) {
	t.Parallel()
	body := `{"message": "You are being rate limited.", "retry_after": 42.1, "global": false}`
	v := newVendor(t, status(429, body), ok)
	ps, _ := newPauses(t, memstore.New())
	resp, got, err := get(t, client(ps), v.URL)
	if err != nil || resp.StatusCode != 429 || got != body {
		t.Fatalf("%v %q %v: the body must reach the caller whole", resp, got, err)
	}
	if left, _ := ps.Paused(context.Background(), strings.TrimPrefix(v.URL, "http://")); left < 42*time.Second {
		t.Fatalf("paused %s, want the body's 43 s", left)
	}
}

func TestAPINames(t *testing.T) {
	t.Parallel()
	v := newVendor(t, throttle("Retry-After", "60"), ok)
	ps, _ := newPauses(t, memstore.New())
	perToken := pause.WithAPIName(func(r *http.Request) string { return "vendor:" + r.Header.Get("Authorization") })
	c := client(ps, perToken)
	call := func(token string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", v.URL, nil)
		req.Header.Set("Authorization", token)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	if resp, _ := call("alice"); resp.StatusCode != 429 {
		t.Fatal("want the first call throttled")
	}
	if _, err := call("alice"); !errors.Is(err, pause.ErrPaused) {
		t.Fatalf("alice's token should be paused: %v", err)
	}
	if resp, err := call("bob"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("bob's token is another API: %v %v", resp, err)
	}
}

func TestPacing(t *testing.T) {
	t.Parallel()
	v := newVendor(t, ok)
	ps, rec := newPauses(t, memstore.New(), pause.WithRate(func(api string) (pause.Rate, bool) {
		return pause.Rate{Events: 10, Period: time.Second, Burst: 1}, true
	}))
	c := client(ps)
	start := time.Now()
	for range 5 {
		if resp, _, err := get(t, c, v.URL); err != nil || resp.StatusCode != 200 {
			t.Fatal(resp, err)
		}
	}
	if el := time.Since(start); el < 390*time.Millisecond {
		t.Fatalf("5 calls at 10/s took %s, want at least 400 ms", el)
	}
	// Without waiting in place, a call over the rate is refused, unsent.
	_, err := client(ps, pause.WithMaxWaitInPlace(0)).Get(v.URL)
	var pe *pause.PausedError
	if !errors.As(err, &pe) || !pe.Paced {
		t.Fatalf("got %v, want a paced *PausedError", err)
	}
	if v.requests.Load() != 5 || rec.Count(keycap.CallHeld, "") != 1 {
		t.Fatalf("%d requests, events %+v", v.requests.Load(), rec.Events())
	}
}

func TestMalformedHintsUseTheDefault(t *testing.T) {
	t.Parallel()
	v := newVendor(t, throttle("Retry-After", "soon", "RateLimit", `"x";r=;t=`, "X-RateLimit-Reset", "ASAP!!"), ok)
	ps, _ := newPauses(t, memstore.New())
	resp, _, err := get(t, client(ps), v.URL)
	if err != nil || resp.StatusCode != 429 {
		t.Fatal(resp, err)
	}
	if left, _ := ps.Paused(context.Background(), strings.TrimPrefix(v.URL, "http://")); left < 59*time.Second || left > time.Minute {
		t.Fatalf("paused %s, want the 60 s default", left)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ps, _ := newPauses(t, memstore.New())
	rec := httptest.NewRecorder()
	throttle("Retry-After", "7")(rec)
	resp := rec.Result()
	err := ps.Check(resp)
	var te *pause.ThrottledError
	if !errors.As(err, &te) || te.StatusCode != 429 || te.Hint.Wait != 7*time.Second {
		t.Fatalf("Check = %v", err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != `{"message":"slow down"}` {
		t.Fatalf("body after Check: %q", b)
	}
	rec = httptest.NewRecorder()
	ok(rec)
	if err := ps.Check(rec.Result()); err != nil {
		t.Fatalf("Check on a 200 = %v", err)
	}
}

func TestRunJob(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	ps, _ := newPauses(t, store, pause.WithJitter(0))
	ctx := context.Background()
	job := jobtype.Job{Kind: "sync", ID: "1"}
	ran := 0
	work := func(err error) func(context.Context) error {
		return func(context.Context) error { ran++; return err }
	}

	// A throttled response from the job pauses the API and releases the job.
	throttled := &pause.ThrottledError{StatusCode: 429}
	throttled.Hint.Wait, throttled.Hint.Throttled = 30*time.Second, true
	err := ps.RunJob(ctx, "vendor", job, work(fmt.Errorf("sync: %w", throttled)))
	var rel *jobtype.ReleaseError
	if !errors.As(err, &rel) || rel.Delay < 29*time.Second || rel.By != "pause:vendor" || !errors.Is(err, pause.ErrThrottled) {
		t.Fatalf("throttled job: %v", err)
	}
	// While paused, jobs are released without running.
	err = ps.RunJob(ctx, "vendor", jobtype.Job{Kind: "sync", ID: "2"}, work(nil))
	if !errors.As(err, &rel) || !errors.Is(err, pause.ErrPaused) || ran != 1 {
		t.Fatalf("job during the pause: %v (ran %d times)", err, ran)
	}
	// Other APIs and other errors are untouched.
	if err := ps.RunJob(ctx, "other", job, work(nil)); err != nil || ran != 2 {
		t.Fatalf("another API: %v", err)
	}
	plain := errors.New("boom")
	if err := ps.RunJob(ctx, "other", job, work(plain)); err != plain {
		t.Fatalf("a plain error: %v", err)
	}
	// A PausedError from the transport releases for the time left.
	pe := &pause.PausedError{API: "third", Until: time.Now().Add(10 * time.Second)}
	if err := ps.RunJob(ctx, "third", job, work(pe)); !errors.As(err, &rel) || rel.Delay < 9*time.Second {
		t.Fatalf("PausedError: %v", err)
	}
}

func TestRunJobDeadline(t *testing.T) {
	t.Parallel()
	ps, _ := newPauses(t, memstore.New(), pause.WithJobDeadline(150*time.Millisecond))
	ctx := context.Background()
	if _, err := ps.Pause(ctx, "vendor", time.Hour); err != nil {
		t.Fatal(err)
	}
	job := jobtype.Job{Kind: "sync", ID: "7"}
	start := time.Now()
	for {
		err := ps.RunJob(ctx, "vendor", job, func(context.Context) error { return nil })
		if errors.Is(err, jobtype.ErrDeadline) {
			if time.Since(start) < 150*time.Millisecond {
				t.Fatalf("failed after %s, before the deadline", time.Since(start))
			}
			return
		}
		if !errors.Is(err, jobtype.ErrReleased) {
			t.Fatalf("before the deadline: %v", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("never failed")
		}
		time.Sleep(20 * time.Millisecond) // the queue's release delay
	}
}

func TestPaceJob(t *testing.T) {
	t.Parallel()
	ps, _ := newPauses(t, memstore.New(), pause.WithJitter(0), pause.WithRate(func(api string) (pause.Rate, bool) {
		return pause.Rate{Events: 10, Period: time.Second, Burst: 1}, api == "vendor"
	}))
	ctx := context.Background()
	job := jobtype.Job{Kind: "sync", ID: "1"}
	ran := 0
	work := func(context.Context) error { ran++; return nil }
	if err := ps.PaceJob(ctx, "vendor", job, work); err != nil || ran != 1 {
		t.Fatalf("first job: %v", err)
	}
	err := ps.PaceJob(ctx, "vendor", job, work)
	var rel *jobtype.ReleaseError
	var pe *pause.PausedError
	if !errors.As(err, &rel) || !errors.As(err, &pe) || !pe.Paced || rel.Delay <= 0 || rel.Delay > 100*time.Millisecond || ran != 1 {
		t.Fatalf("second job at once: %v (ran %d)", err, ran)
	}
	if err := ps.PaceJob(ctx, "unpaced", job, work); err != nil || ran != 2 {
		t.Fatalf("an API without a rate: %v", err)
	}
}

// TestEmptyAPINameIsAnError: a request whose API name is empty would share
// one pause with every other nameless request: it is refused, unsent, with
// an error that says so.
func TestEmptyAPINameIsAnError(t *testing.T) {
	t.Parallel()
	ps, _ := newPauses(t, memstore.New())
	v := newVendor(t, ok)
	c := client(ps, pause.WithAPIName(func(*http.Request) string { return "" }))
	if _, _, err := get(t, c, v.URL); !errors.Is(err, pause.ErrNoAPIName) {
		t.Fatalf("a request without an API name: %v, want ErrNoAPIName", err)
	}
	if v.requests.Load() != 0 {
		t.Fatal("a request without an API name was sent")
	}
	if err := ps.RunJob(context.Background(), "", jobtype.Job{Kind: "k", ID: "1"}, func(context.Context) error { return nil }); !errors.Is(err, pause.ErrNoAPIName) {
		t.Fatalf("RunJob without an API name: %v", err)
	}
}
