package caddykeycap_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testenv"
)

// A request that finds its key's slots all taken gets 429 with the limit's
// Retry-After at once, without reaching the upstream; the slot is free again
// when the upstream's response is done. handle_errors answers the 429 its
// own way, {http.keycap.limit} naming the limit.
func TestRefusalIs429WithRetryAfter(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}, 1), make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			select { // or the proxy went away: a failed test's cleanup never waits on it
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(upstream.Close)
	addr := testenv.FreeAddr(t)
	startCaddy(t, fmt.Sprintf(`{
	admin off
	auto_https off
}
http://%s {
	keycap {
		limit reports {
			key {header.X-User}
			max 1
			retry_after 3s
		}
	}
	reverse_proxy %s
	handle_errors 429 {
		respond "{http.keycap.limit} is full" 429
	}
}
`, addr, upstream.Listener.Addr()))

	slow := make(chan int, 1)
	go func() { slow <- get(t, "http://"+addr+"/slow", "alice").StatusCode }()
	waitFor(t, started, "the slow request at the upstream")

	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	req.Header.Set("X-User", "alice")
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "3" || string(body) != "reports is full" {
		t.Fatalf("alice's second request: %d, Retry-After %q, %q; want 429, 3, %q",
			res.StatusCode, res.Header.Get("Retry-After"), body, "reports is full")
	}
	if res := get(t, "http://"+addr+"/", "bob"); res.StatusCode != http.StatusOK {
		t.Fatalf("bob's request: %d, want 200 (another key)", res.StatusCode)
	}
	close(release)
	if code := waitFor(t, slow, "the slow request's response"); code != http.StatusOK {
		t.Fatalf("slow request: %d, want 200", code)
	}
	if res := get(t, "http://"+addr+"/", "alice"); res.StatusCode != http.StatusOK {
		t.Fatalf("alice after her slow request: %d, want 200", res.StatusCode)
	}
}

// A streamed response holds its slot while it streams, and a client that
// goes away mid-stream frees it as soon as the upstream's handler returns.
// The /wait route counts in the same pools (same name, same store) with a
// wait: its request is served once the slot frees, so the test needs no
// polling.
func TestStreamHoldsSlotUntilClientLeaves(t *testing.T) {
	t.Parallel()
	streaming, returned := make(chan struct{}, 1), make(chan struct{}, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		defer func() { returned <- struct{}{} }()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		http.NewResponseController(w).Flush()
		streaming <- struct{}{}
		<-r.Context().Done() // streams until the client leaves
	}))
	t.Cleanup(upstream.Close)
	addr := testenv.FreeAddr(t)
	startCaddy(t, fmt.Sprintf(`{
	admin off
	auto_https off
}
http://%[1]s {
	handle /wait {
		keycap {
			limit events {
				max 1
				wait 20s
			}
		}
		reverse_proxy %[2]s
	}
	handle {
		keycap events 1
		reverse_proxy %[2]s {
			flush_interval -1
		}
	}
}
`, addr, upstream.Listener.Addr()))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // bounds the stream's reads
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/stream", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	waitFor(t, streaming, "the stream at the upstream")

	if res := get(t, "http://"+addr+"/", ""); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request beside the stream: %d, want 429 (the stream holds the slot)", res.StatusCode)
	}
	waited := make(chan int, 1)
	go func() { waited <- get(t, "http://"+addr+"/wait", "").StatusCode }()

	cancel() // the client leaves
	_ = res.Body.Close()
	waitFor(t, returned, "the upstream's handler to return")
	if code := waitFor(t, waited, "the waiting request"); code != http.StatusOK {
		t.Fatalf("request waiting for the stream's slot: %d, want 200", code)
	}
}

// With the store down, a limit that fails closed answers 503 with its
// Retry-After, and one that fails open lets the request through.
func TestStoreDownFailClosedAndOpen(t *testing.T) {
	t.Parallel()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(upstream.Close)
	addr, dead := testenv.FreeAddr(t), closedPort(t)
	startCaddy(t, fmt.Sprintf(`{
	admin off
	auto_https off
}
http://%[1]s {
	handle /closed {
		keycap {
			limit closed {
				max 5
				fail_mode closed
				retry_after 7s
			}
			store redis %[3]s
		}
		reverse_proxy %[2]s
	}
	handle /open {
		keycap {
			limit open {
				max 5
				fail_mode open
			}
			store redis %[3]s
		}
		reverse_proxy %[2]s
	}
}
`, addr, upstream.Listener.Addr(), dead))

	for range 3 {
		res := get(t, "http://"+addr+"/closed", "")
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "7" {
			t.Fatalf("fail closed: %d, Retry-After %q; want 503, 7", res.StatusCode, res.Header.Get("Retry-After"))
		}
		if res := get(t, "http://"+addr+"/open", ""); res.StatusCode != http.StatusOK {
			t.Fatalf("fail open: %d, want 200", res.StatusCode)
		}
	}
}

// A key template that expands to nothing counts the request against the
// client's address by default, and is refused with 400 under empty_key
// refuse; never a 500. Two clients, from 127.0.0.1 and 127.0.0.2, tell the
// address's pools apart.
func TestEmptyKey(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ip/slow" {
			started <- struct{}{}
			select { // or the proxy went away: a failed test's cleanup never waits on it
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(upstream.Close)
	addr := testenv.FreeAddr(t)
	startCaddy(t, fmt.Sprintf(`{
	admin off
	auto_https off
}
http://%[1]s {
	handle /ip/* {
		keycap byuser 1 {header.X-User}
		reverse_proxy %[2]s
	}
	handle /strict {
		keycap {
			limit strict {
				key {header.X-User}
				max 1
				empty_key refuse
			}
		}
		reverse_proxy %[2]s
	}
}
`, addr, upstream.Listener.Addr()))

	if res := get(t, "http://"+addr+"/strict", ""); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("empty key, empty_key refuse: %d, want 400", res.StatusCode)
	}
	if res := get(t, "http://"+addr+"/strict", "alice"); res.StatusCode != http.StatusOK {
		t.Fatalf("key given, empty_key refuse: %d, want 200", res.StatusCode)
	}
	// Without X-User, a request counts in the pool of its client's address.
	one, two := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2")
	done := make(chan int, 1)
	go func() { done <- getWith(t, one, "http://"+addr+"/ip/slow", "").StatusCode }()
	waitFor(t, started, "the slow request at the upstream")
	if res := getWith(t, one, "http://"+addr+"/ip/x", ""); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("127.0.0.1's second request without a key: %d, want 429", res.StatusCode)
	}
	if res := getWith(t, two, "http://"+addr+"/ip/x", ""); res.StatusCode != http.StatusOK {
		t.Fatalf("127.0.0.2's request without a key: %d, want 200 (another address)", res.StatusCode)
	}
	close(release)
	if code := waitFor(t, done, "the slow request"); code != http.StatusOK {
		t.Fatalf("slow request: %d", code)
	}
}

// clientFrom returns a client whose connections come from the loopback
// address ip.
func clientFrom(t testing.TB, ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// get sends a GET with X-User user (none when empty) and returns the
// response, its body read; it fails t after 30 seconds.
func get(t testing.TB, url, user string) *http.Response {
	return getWith(t, http.DefaultClient, url, user)
}

// getWith is get with the client c.
func getWith(t testing.TB, c *http.Client, url, user string) *http.Response {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Error(err)
		return &http.Response{}
	}
	if user != "" {
		req.Header.Set("X-User", user)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return &http.Response{}
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res
}

// waitFor receives from ch, failing t after 30 seconds.
func waitFor[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
		panic("unreachable")
	}
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	if strings.HasSuffix(addr, ":0") {
		t.Fatal("no port")
	}
	return addr
}
