package httplimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

type env struct {
	limiter  *keycap.Limiter
	limiters *httplimit.Limiters
	rec      *keycaptest.Recorder
	logs     *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newEnv(t *testing.T, store keycap.Store, opts ...httplimit.Option) *env {
	t.Helper()
	e := &env{rec: &keycaptest.Recorder{}, logs: &syncBuffer{}}
	var err error
	e.limiter, err = keycap.NewLimiter(store, keycap.WithObserver(e.rec), keycap.WithRecoverAfter(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.limiter.Close() })
	opts = append([]httplimit.Option{httplimit.WithLogger(slog.New(slog.NewTextHandler(e.logs, nil)))}, opts...)
	e.limiters, err = httplimit.New(e.limiter, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) register(t *testing.T, name string, fn httplimit.LimitFunc) {
	t.Helper()
	if err := e.limiters.For(name, fn); err != nil {
		t.Fatal(err)
	}
}

// gate is a handler that holds each request until released, and counts the
// requests it saw.
type gate struct {
	entered chan struct{}
	release *testkit.Gate
	runs    atomic.Int32
}

// newGate returns a gate that t's cleanup opens, so that a failed test never
// leaves a request blocked.
func newGate(t *testing.T) *gate {
	g := &gate{entered: make(chan struct{}, 100), release: testkit.NewGate()}
	t.Cleanup(g.release.Open)
	return g
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.runs.Add(1)
	g.entered <- struct{}{}
	g.release.Wait(20 * time.Second)
	w.WriteHeader(http.StatusOK)
}

// wait waits for wg within 10 s.
func wait(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	testkit.Recv(t, done, 10*time.Second, "the requests in flight to end")
}

func do(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func req(remote string, header ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

// holding runs a request through h in the background and waits until the
// handler holds its slot.
func holding(t *testing.T, h http.Handler, g *gate, r *http.Request) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() { do(h, r) })
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never ran")
	}
	return &wg
}

func TestRefusalIs429WithRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	e.register(t, "exports", func(*http.Request) httplimit.Rule { return httplimit.Max(1) })
	g := newGate(t)
	h := e.limiters.Must("exports")(g)
	wg := holding(t, h, g, req("192.0.2.1:1000"))

	w := do(h, req("192.0.2.1:1001"))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("got %d Retry-After %q, want 429 and 1", w.Code, w.Header().Get("Retry-After"))
	}
	if !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") || w.Body.String() != "Too Many Concurrent Requests\n" {
		t.Fatalf("plain body %q (%s)", w.Body, w.Header().Get("Content-Type"))
	}
	for name := range w.Header() {
		if strings.HasPrefix(strings.ToLower(name), "x-ratelimit") {
			t.Fatalf("refusal sent %s", name)
		}
	}
	w = do(h, req("192.0.2.1:1002", "Accept", "text/html, application/json;q=0.9"))
	var body struct{ Message string }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Message != "Too Many Concurrent Requests" || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("JSON body %q: %v", w.Body, err)
	}
	// Another client IP has its own pool.
	wg2 := holding(t, h, g, req("192.0.2.2:1000"))
	if g.runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 (refused requests never reach it)", g.runs.Load())
	}
	g.release.Open()
	wait(t, wg)
	wg2.Wait()
	if w := do(h, req("192.0.2.1:1003")); w.Code != http.StatusOK {
		t.Fatalf("after release: %d", w.Code)
	}
}

func TestRetryAfterAndResponseHook(t *testing.T) {
	t.Parallel()
	cases := []struct {
		slots httplimit.Slots
		want  string
	}{
		{httplimit.Max(0), "1"},
		{httplimit.Max(0).RetryAfter(5 * time.Second), "5"},
		{httplimit.Max(0).RetryAfter(1500 * time.Millisecond), "2"},
		{httplimit.Max(0).RetryAfter(0), ""},
	}
	for _, tc := range cases {
		e := newEnv(t, memstore.New())
		e.register(t, "r", func(*http.Request) httplimit.Rule { return tc.slots })
		w := do(e.limiters.Must("r")(http.NotFoundHandler()), req("192.0.2.1:1"))
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != tc.want {
			t.Errorf("got %d Retry-After %q, want 429 and %q", w.Code, w.Header().Get("Retry-After"), tc.want)
		}
	}

	e := newEnv(t, memstore.New())
	var got *keycap.LimitError
	e.register(t, "custom", func(*http.Request) httplimit.Rule {
		return httplimit.Max(0).By("tenant:9").RetryAfter(7 * time.Second).Respond(
			func(w http.ResponseWriter, r *http.Request, err *keycap.LimitError) {
				got = err
				if w.Header().Get("Retry-After") != "7" {
					t.Error("Retry-After not set before the hook")
				}
				w.WriteHeader(http.StatusTeapot)
			})
	})
	if w := do(e.limiters.Must("custom")(http.NotFoundHandler()), req("192.0.2.1:1")); w.Code != http.StatusTeapot {
		t.Fatalf("hook not used: %d", w.Code)
	}
	if got == nil || got.Limit.Name() != "custom" || got.Limit.Key() != "tenant:9" {
		t.Fatalf("hook got %+v", got)
	}
}

func TestSeveralLimitsAllOrNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	e.register(t, "exports", func(r *http.Request) httplimit.Rule {
		user := r.Header.Get("User")
		return httplimit.All(
			httplimit.Max(2).By("user:"+user),
			httplimit.Max(1).By("team:1").RetryAfter(9*time.Second),
		)
	})
	g := newGate(t)
	h := e.limiters.Must("exports")(g)
	wg := holding(t, h, g, req("192.0.2.1:1", "User", "a"))
	w := do(h, req("192.0.2.1:2", "User", "b"))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "9" {
		t.Fatalf("team refusal: %d Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	g.release.Open()
	wait(t, wg)
	// b's user slot was given back when the team refused: b holds nothing.
	if n := e.rec.Count(keycap.SlotAcquired, ""); n != 2 {
		t.Fatalf("%d slots acquired, want a's two", n)
	}
	if a, r := e.rec.Count(keycap.SlotAcquired, ""), e.rec.Count(keycap.SlotReleased, ""); a != r {
		t.Fatalf("acquired %d, released %d", a, r)
	}
}

func TestNilRuleMeansNoLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	e.register(t, "ai", func(r *http.Request) httplimit.Rule {
		if r.Header.Get("Staff") != "" {
			return nil
		}
		return httplimit.Max(0)
	})
	h := e.limiters.Must("ai")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	if w := do(h, req("192.0.2.1:1", "Staff", "1")); w.Code != http.StatusOK {
		t.Fatalf("staff: %d", w.Code)
	}
	if w := do(h, req("192.0.2.1:1")); w.Code != http.StatusTooManyRequests {
		t.Fatalf("others: %d", w.Code)
	}
	if n := e.rec.Count(keycap.SlotAcquired, ""); n != 0 {
		t.Fatalf("%d slots taken for an unlimited request", n)
	}
}

func TestNamesAreCheckedAtStartUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	if _, err := e.limiters.Middleware("nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unregistered name: %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Must did not panic for an unregistered name")
			}
		}()
		e.limiters.Must("nope")
	}()
	fn := func(*http.Request) httplimit.Rule { return nil }
	if err := e.limiters.For("", fn); err == nil {
		t.Error("For with an empty name accepted")
	}
	// Job names are not reserved: HTTP limits count in a family of their
	// own (keycap.FamilyApp), apart from joblimit's (FamilyJob).
	for _, name := range []string{"job", "job:SendMail"} {
		if err := e.limiters.For(name, fn); err != nil {
			t.Errorf("For(%q): %v", name, err)
		}
	}
	if err := e.limiters.For("x", nil); err == nil {
		t.Error("nil function accepted")
	}
	if _, err := e.limiters.Inline(-1, "p"); !errors.Is(err, keycap.ErrInvalidLimit) {
		t.Errorf("Inline(-1): %v", err)
	}
	if _, err := httplimit.New(nil); err == nil {
		t.Error("nil limiter accepted")
	}
}

func TestInvalidLimitIsALogged500(t *testing.T) {
	t.Parallel()
	cases := map[string]httplimit.Rule{
		"negative max":    httplimit.Max(-1),
		"negative wait":   httplimit.Limit(keycap.Spec{Max: 1, Wait: -time.Second}),
		"negative ttl":    httplimit.Limit(keycap.Spec{Max: 1, TTL: -time.Second}),
		"ttl below 1ms":   httplimit.Limit(keycap.Spec{Max: 1, TTL: time.Microsecond}),
		"negative budget": httplimit.Limit(keycap.Spec{Max: 1, Budget: -time.Second}),
		"negative retry":  httplimit.Max(1).RetryAfter(-time.Second),
		"same key twice":  httplimit.All(httplimit.Max(1).By("a"), httplimit.Max(2).By("a")),
	}
	for name, rule := range cases {
		e := newEnv(t, memstore.New())
		e.register(t, "broken", func(*http.Request) httplimit.Rule { return rule })
		ran := false
		w := do(e.limiters.Must("broken")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })), req("192.0.2.1:1"))
		if w.Code != http.StatusInternalServerError || ran {
			t.Errorf("%s: got %d (handler ran: %v), want 500", name, w.Code, ran)
		}
		if logs := e.logs.String(); !strings.Contains(logs, "limiter=broken") || !strings.Contains(logs, "invalid") {
			t.Errorf("%s: log does not name the limiter and the problem: %q", name, logs)
		}
	}
	// A TTL or a budget of 0 is no longer invalid: it is the default.
	e := newEnv(t, memstore.New())
	e.register(t, "defaults", func(*http.Request) httplimit.Rule { return httplimit.Limit(keycap.Spec{Max: 1, TTL: 0, Budget: 0}) })
	if w := do(e.limiters.Must("defaults")(http.NotFoundHandler()), req("192.0.2.1:1")); w.Code != http.StatusNotFound {
		t.Errorf("TTL and budget 0: got %d, want the handler's 404", w.Code)
	}
}

func TestDefaultKey(t *testing.T) {
	t.Parallel()
	type ctxKey struct{}
	identify := func(r *http.Request) (httplimit.Identity, bool) {
		id, ok := r.Context().Value(ctxKey{}).(httplimit.Identity)
		return id, ok
	}
	e := newEnv(t, memstore.New(), httplimit.WithIdentify(identify))
	e.register(t, "k", func(*http.Request) httplimit.Rule { return httplimit.Max(1) })
	g := newGate(t)
	h := e.limiters.Must("k")(g)
	as := func(kind, id string) *http.Request {
		r := req("192.0.2.1:1")
		return r.WithContext(context.WithValue(r.Context(), ctxKey{}, httplimit.Identity{Kind: kind, ID: id}))
	}
	wgUser := holding(t, h, g, as("user", "1"))
	wgAdmin := holding(t, h, g, as("admin", "1")) // same id, other kind: other pool
	wgGuest := holding(t, h, g, req("192.0.2.1:2"))
	if w := do(h, as("user", "1")); w.Code != http.StatusTooManyRequests {
		t.Fatalf("user:1 twice: %d", w.Code)
	}
	g.release.Open()
	wgUser.Wait()
	wgAdmin.Wait()
	wgGuest.Wait()
	keys := map[string]bool{}
	for _, ev := range e.rec.Events() {
		if ev.Kind == keycap.SlotAcquired {
			keys[ev.Limit.Key()] = true
		}
	}
	for _, k := range []string{"user:1", "admin:1", "ip:192.0.2.1"} {
		if !keys[k] {
			t.Errorf("no slot for key %q; got %v", k, keys)
		}
	}
}

func TestInlineAndSharedPools(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	e.register(t, "imports", func(*http.Request) httplimit.Rule { return httplimit.Max(1) })
	inline, err := e.limiters.Inline(1, "imports")
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(t)
	routeA := e.limiters.Must("imports")(g)
	routeB := inline(g)
	routeC := e.limiters.Must("imports")(http.NotFoundHandler()) // another route, same limiter
	wg := holding(t, routeA, g, req("192.0.2.1:1"))
	for name, h := range map[string]http.Handler{"inline": routeB, "other route": routeC} {
		if w := do(h, req("192.0.2.1:2")); w.Code != http.StatusTooManyRequests {
			t.Errorf("%s does not share the pool: %d", name, w.Code)
		}
	}
	def, _ := e.limiters.Inline(1, "")
	if w := do(def(http.NotFoundHandler()), req("192.0.2.1:3")); w.Code != http.StatusNotFound {
		t.Errorf("default pool is not separate: %d", w.Code)
	}
	g.release.Open()
	wait(t, wg)
	if e.rec.Count(keycap.SlotAcquired, "default") != 1 {
		t.Error("inline without a pool name is not counted in \"default\"")
	}
}

func TestWaitForASlot(t *testing.T) {
	t.Parallel()
	st := &refusals{Store: memstore.New(), refused: make(chan struct{}, 1)}
	e := newEnv(t, st)
	e.register(t, "w", func(*http.Request) httplimit.Rule {
		return httplimit.Limit(keycap.Spec{Max: 1, Wait: 10 * time.Second})
	})
	g := newGate(t)
	h := e.limiters.Must("w")(g)
	wg := holding(t, h, g, req("192.0.2.1:1"))
	got := make(chan int, 1)
	go func() { got <- do(h, req("192.0.2.1:2")).Code }()
	testkit.Recv(t, st.refused, 10*time.Second, "the refusal") // the second request found the pool full: it waits
	g.release.Open()                                           // the first request ends; the waiter gets its slot
	wait(t, wg)
	if code := testkit.Recv(t, got, 10*time.Second, "the waiting request"); code != http.StatusOK {
		t.Fatalf("waiting request: %d", code)
	}
	if g.runs.Load() != 2 {
		t.Fatalf("the handler ran %d times, want 2", g.runs.Load())
	}
	if n := e.rec.Count(keycap.LimitExceeded, "w"); n != 0 {
		t.Fatalf("%d refusals: the waiter was refused instead of waiting", n)
	}
}

// refusals is a Store that signals each acquire it refuses. It declares no
// feature: its waiters poll.
type refusals struct {
	store.Store
	refused chan struct{}
}

func (s *refusals) Features() store.Features { return 0 }

func (s *refusals) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	g, err := s.Store.Acquire(ctx, pool, owner, d)
	if !g.Granted && err == nil {
		select {
		case s.refused <- struct{}{}:
		default:
		}
	}
	return g, err
}

// failing is a memstore that can be made to fail, as a store that is down
// does: acquires and releases alike. It declares no feature.
type failing struct {
	store.Store
	down atomic.Bool
}

var errDown = errors.New("injected outage")

func (f *failing) Features() store.Features { return 0 }

func (f *failing) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	if f.down.Load() {
		return store.Grant{}, errDown
	}
	return f.Store.Acquire(ctx, pool, owner, d)
}

func (f *failing) Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	if f.down.Load() {
		return false, errDown
	}
	return f.Store.Release(ctx, pool, owner, d, leave)
}

func TestStoreFailure(t *testing.T) {
	t.Parallel()
	st := &failing{Store: memstore.New()}
	e := newEnv(t, st)
	e.register(t, "open", func(*http.Request) httplimit.Rule { return httplimit.Max(1) })
	e.register(t, "closed", func(*http.Request) httplimit.Rule {
		return httplimit.All(httplimit.Limit(keycap.Spec{Max: 1, FailMode: keycap.FailClosed}), httplimit.Max(1).By("x").RetryAfter(30*time.Second))
	})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	open, closed := e.limiters.Must("open")(ok), e.limiters.Must("closed")(ok)
	st.down.Store(true)
	for range 20 {
		if w := do(open, req("192.0.2.1:1")); w.Code != http.StatusOK {
			t.Fatalf("fail-open: %d", w.Code)
		}
		w := do(closed, req("192.0.2.1:1"))
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "30" {
			t.Fatalf("fail-closed: %d Retry-After %q, want 503 and the largest, 30", w.Code, w.Header().Get("Retry-After"))
		}
	}
	if n := e.rec.Count(keycap.StoreFailed, ""); n != 1 {
		t.Fatalf("outage reported %d times, want once", n)
	}
	st.down.Store(false)
	// Recovered once the store has answered without failing for a
	// millisecond (WithRecoverAfter).
	deadline := time.Now().Add(5 * time.Second)
	for e.rec.Count(keycap.StoreRecovered, "") == 0 && time.Now().Before(deadline) {
		if w := do(closed, req("192.0.2.1:1")); w.Code != http.StatusOK {
			t.Fatalf("after recovery: %d", w.Code)
		}
	}
	if n := e.rec.Count(keycap.StoreRecovered, ""); n != 1 {
		t.Fatalf("recovery reported %d times", n)
	}
}

func TestReleasedOnPanic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	e.register(t, "p", func(*http.Request) httplimit.Rule { return httplimit.Max(1) })
	for _, v := range []any{"boom", http.ErrAbortHandler} {
		h := e.limiters.Must("p")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(v) }))
		func() {
			defer func() {
				if r := recover(); r != v {
					t.Fatalf("recovered %v, want %v", r, v)
				}
			}()
			do(h, req("192.0.2.1:1"))
		}()
	}
	ok := e.limiters.Must("p")(http.NotFoundHandler())
	if w := do(ok, req("192.0.2.1:1")); w.Code != http.StatusNotFound {
		t.Fatalf("slot not released after a panic: %d", w.Code)
	}
	if a, r := e.rec.Count(keycap.SlotAcquired, ""), e.rec.Count(keycap.SlotReleased, ""); a != 3 || r != 3 {
		t.Fatalf("acquired %d, released %d", a, r)
	}
}

// TestStreamKeepsItsSlot streams server-sent events for longer than the slot's
// TTL through a real server: the slot is held (renewed) for the whole stream,
// and released when it ends.
func TestStreamKeepsItsSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	const ttl = 200 * time.Millisecond
	e.register(t, "sse", func(*http.Request) httplimit.Rule { return httplimit.Limit(keycap.Spec{Max: 1, TTL: ttl}) })
	next := make(chan struct{})
	done := make(chan struct{})
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			if _, err := io.WriteString(w, "data: tick\n\n"); err != nil {
				return
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush through the middleware: %v", err)
				return
			}
			select {
			case _, ok := <-next:
				if !ok {
					return
				}
			case <-r.Context().Done():
				return
			}
		}
	})
	srv := httptest.NewServer(e.limiters.Must("sse")(stream))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	end := time.Now().Add(5 * ttl)
	for time.Now().Before(end) {
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		// While streaming, the slot is held: a second request is refused.
		r2, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		r2.Body.Close()
		if r2.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("during the stream: %d, want 429", r2.StatusCode)
		}
		time.Sleep(ttl / 4) // the stream outlives its TTL several times over
		next <- struct{}{}
	}
	close(next)
	testkit.Recv(t, done, 10*time.Second, "the stream's end")
	if e.rec.Count(keycap.LeaseLost, "") != 0 {
		t.Fatal("the stream's lease was lost")
	}
	waitReleased(t, e.rec, 1)
}

func waitReleased(t *testing.T, rec *keycaptest.Recorder, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for rec.Count(keycap.SlotReleased, "") < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots released, want %d", rec.Count(keycap.SlotReleased, ""), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientDisconnectFreesTheSlot cancels a request mid-stream: the handler
// sees its context end, returns, and the slot is released.
func TestClientDisconnectFreesTheSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	e.register(t, "dc", func(*http.Request) httplimit.Rule { return httplimit.Max(1) })
	started := make(chan struct{})
	returned := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/again" {
			return
		}
		defer close(returned)
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		close(started)
		<-r.Context().Done()
	})
	srv := httptest.NewServer(e.limiters.Must("dc")(h))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, started, 10*time.Second, "the stream's start")
	cancel()
	resp.Body.Close()
	testkit.Recv(t, returned, 10*time.Second, "the handler's return")
	waitReleased(t, e.rec, 1)
	r2, err := http.Get(srv.URL + "/again")
	if err == nil {
		r2.Body.Close()
	}
	if err != nil || r2.StatusCode != http.StatusOK {
		t.Fatalf("after the disconnect: %v %v", err, r2)
	}
}

func TestReRegisteringReplaces(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	e.register(t, "x", func(*http.Request) httplimit.Rule { return httplimit.Max(5) })
	h := e.limiters.Must("x")(http.NotFoundHandler())
	// A test forces the refusal path of a route already built.
	e.register(t, "x", func(*http.Request) httplimit.Rule { return httplimit.Max(0) })
	if w := do(h, req("192.0.2.1:1")); w.Code != http.StatusTooManyRequests {
		t.Fatalf("got %d, want 429", w.Code)
	}
}
