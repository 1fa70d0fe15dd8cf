package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
)

// TestReloadKeepsTheOldStoreUntilItsRequestsEnd: a reload onto another store
// must not close the old one under a request still holding a slot in it (a
// long download, a stream, a WebSocket); it closes it when the last one ends.
func TestReloadKeepsTheOldStoreUntilItsRequestsEnd(t *testing.T) {
	t.Parallel()
	entered, finish := make(chan struct{}, 1), testkit.NewGate()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		finish.Wait(20 * time.Second)
		_, _ = io.WriteString(w, "done")
	}))
	defer upstream.Close()
	defer finish.Open() // before upstream.Close: a failed test leaves no handler blocked
	config := func(prefix string) *Config {
		cfg, err := ParseConfig("t.yaml", []byte("upstream: "+upstream.URL+"\nstore: {type: memory, prefix: "+prefix+"}\n"+
			"routes: [{name: slow, path: /, limits: [{max: 1, key: 'header:X-User'}]}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	g, err := New(config("a:"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g)
	defer srv.Close()

	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/x")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	testkit.Recv(t, entered, 10*time.Second, "the request at the upstream")
	old := g.router().backend
	if err := g.Reload(config("b:")); err != nil {
		t.Fatal(err)
	}
	if g.router().backend == old {
		t.Fatal("a new store prefix kept the old store")
	}
	select {
	case <-old.closed:
		t.Fatal("the old store was closed under a request in flight")
	default:
	}
	// The old limiter still serves the request's lease.
	lease, err := old.limiter.Acquire(context.Background(), keycap.Spec{Name: "probe", Max: 1}.For("k"))
	if errors.Is(err, keycap.ErrClosed) {
		t.Fatal("the old limiter was closed under a request in flight")
	}
	if err != nil {
		t.Fatal(err)
	}
	lease.Release()

	finish.Open()
	if err := testkit.Recv(t, done, 10*time.Second, "the request's end"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the old store was not closed after its last request ended")
	}
}

// TestReloadOntoAnotherStoreKeepsTheCap: requests that started before a
// reload hold slots in the old store; until they end, new requests count in
// both stores, so a cap of 3 admits no fourth during the switch.
func TestReloadOntoAnotherStoreKeepsTheCap(t *testing.T) {
	t.Parallel()
	reloadKeepsTheCap(t, "", "{max: 3, key: 'header:X-User'}")
}

// TestReloadOntoAnotherStoreKeepsAParent: the same for a limit with a
// parent, which the store after the switch must still serve (the handover
// passes shares and lines on to it).
func TestReloadOntoAnotherStoreKeepsAParent(t *testing.T) {
	t.Parallel()
	reloadKeepsTheCap(t, "parents: [{name: all, max: 3}]\n", "{max: 3, key: 'header:X-User', parent: all, wait: 1ms}")
}

func reloadKeepsTheCap(t *testing.T, parents, limit string) {
	entered, finish := make(chan struct{}, 10), make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") != "" {
			entered <- struct{}{}
			select {
			case <-finish:
			case <-time.After(10 * time.Second):
			}
		}
	}))
	defer upstream.Close()
	var finished sync.Once
	done := func() { finished.Do(func() { close(finish) }) }
	defer done()
	config := func(prefix string) *Config {
		cfg, err := ParseConfig("t.yaml", []byte("upstream: "+upstream.URL+"\nstore: {type: memory, prefix: "+prefix+"}\n"+parents+
			"routes: [{name: r, path: /, limits: ["+limit+"]}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	g, err := New(config("a:"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g)
	defer srv.Close()
	get := func(query string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x"+query, nil)
		req.Header.Set("X-User", "u")
		resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	results := make(chan int, 3)
	for range 3 {
		go func() { results <- get("?hold=1") }()
	}
	for range 3 {
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("the held requests never reached the upstream")
		}
	}
	if err := g.Reload(config("b:")); err != nil {
		t.Fatal(err)
	}
	if code := get(""); code != http.StatusTooManyRequests {
		t.Fatalf("a fourth request during the switch: %d, want 429", code)
	}
	done()
	for range 3 {
		select {
		case code := <-results:
			if code != 200 {
				t.Fatalf("a held request ended with %d", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the held requests never ended")
		}
	}
	if code := get(""); code != 200 {
		t.Fatalf("after the old requests ended: %d, want 200", code)
	}
}

// TestReloadOntoNoStoreServesLimitsThatWait: a route whose limit waits
// (wait: 100ms), reloaded from the memory store onto store type none
// (nullstore, which keeps no lines), while a request of the old
// configuration still holds its slot: every request is served, and no
// store failure is reported. The handover declares exactly its new store's
// features, so the Limiter never asks it for a line; the handover once
// claimed lines whatever its new store, and its line calls failed ("gateway:
// the store keeps no lines or shares"): 503 under fail_mode closed, a store
// outage reported under fail_mode open.
func TestReloadOntoNoStoreServesLimitsThatWait(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"closed", "open"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			entered, finish := make(chan struct{}, 1), testkit.NewGate()
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("hold") != "" {
					entered <- struct{}{}
					finish.Wait(20 * time.Second)
				}
			}))
			defer upstream.Close()
			config := func(store string) *Config {
				cfg, err := ParseConfig("t.yaml", []byte("upstream: "+upstream.URL+"\nstore: "+store+"\n"+
					"routes: [{name: r, path: /, limits: [{max: 2, key: 'header:X-User', wait: 100ms}]}]\n"))
				if err != nil {
					t.Fatal(err)
				}
				return cfg
			}
			logs := &testLog{}
			g, err := New(config("{type: memory}"), slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			srv := httptest.NewServer(g)
			defer srv.Close()
			defer finish.Open() // before srv.Close and upstream.Close: a failed test leaves no request blocked
			get := func(query string) (int, error) {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x"+query, nil)
				req.Header.Set("X-User", "u")
				resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
				if err != nil {
					return 0, err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode, nil
			}

			type result struct {
				code int
				err  error
			}
			held := make(chan result, 1)
			go func() {
				code, err := get("?hold=1")
				held <- result{code, err}
			}()
			testkit.Recv(t, entered, 10*time.Second, "the held request at the upstream")
			if err := g.Reload(config("{type: none, fail_mode: " + mode + "}")); err != nil {
				t.Fatal(err)
			}
			if g.router().backend.handover == nil {
				t.Fatal("the reload onto another store made no handover")
			}
			for i := range 5 { // while the held request lasts: counted in both stores
				if code, err := get(""); code != http.StatusOK {
					t.Fatalf("request %d after the reload, during the handover: %d %v, want 200\n%s", i, code, err, logs)
				}
			}
			finish.Open()
			if r := testkit.Recv(t, held, 20*time.Second, "the held request's end"); r.code != http.StatusOK {
				t.Fatalf("the held request ended with %d %v", r.code, r.err)
			}
			for i := range 5 {
				if code, err := get(""); code != http.StatusOK {
					t.Fatalf("request %d after the held one ended: %d %v, want 200\n%s", i, code, err, logs)
				}
			}
			for _, bad := range []string{"store failed", "keeps no lines"} {
				if strings.Contains(logs.String(), bad) {
					t.Errorf("the logs report %q:\n%s", bad, logs)
				}
			}
		})
	}
}

// testLog is a slog handler's output that tests can search.
type testLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *testLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *testLog) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
