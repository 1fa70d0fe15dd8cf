package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/pusherserver"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
)

var binary string // the keycap binary, built once by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "keycap-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "keycap")
	out, err := exec.Command("go", "build", "-o", binary, "../..").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building keycap: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// gw is a running keycap process.
type gw struct {
	cmd     *exec.Cmd
	file    string
	proxy   string // http://host:port
	admin   string
	logs    chan map[string]any
	exited  chan struct{} // closed when the process has exited
	exitErr error         // its exit status, once exited is closed
}

// startGateway writes config (listen and admin addresses are added) and
// starts the binary on it, returning once it listens.
func startGateway(t *testing.T, config string) *gw {
	t.Helper()
	file := filepath.Join(t.TempDir(), "keycap.yaml")
	for _, line := range []string{"log: {level: debug}", "shutdown_timeout: 10s", "admin: 127.0.0.1:0", "listen: 127.0.0.1:0"} {
		if field, _, _ := strings.Cut(line, ":"); !strings.Contains("\n"+config, "\n"+field+":") {
			config = line + "\n" + config
		}
	}
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return runGateway(t, file)
}

// runGateway starts the binary on a configuration file whose proxy and admin
// addresses are port 0, with serve's flags, returning once it listens.
func runGateway(t *testing.T, file string, flags ...string) *gw {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "-config", file}, flags...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gw{cmd: cmd, file: file, logs: make(chan map[string]any, 10000), exited: make(chan struct{})}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-g.exited // stderr closes with the process: the reader below ends
	})
	go func() {
		defer func() {
			g.exitErr = cmd.Wait() // after stderr is read to its end, as StderrPipe asks
			close(g.exited)
		}()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				select {
				case g.logs <- m:
				default:
				}
			} else {
				t.Logf("keycap: %s", sc.Text())
			}
		}
		close(g.logs)
	}()
	for g.proxy == "" || g.admin == "" {
		m := g.waitLog(t, "keycap: listening")
		addr := "http://" + m["addr"].(string)
		switch m["kind"] {
		case "proxy":
			g.proxy = addr
		case "admin":
			g.admin = addr
		}
	}
	return g
}

// waitLog waits for a log line with msg.
func (g *gw) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-g.logs:
			if !ok {
				t.Fatalf("keycap exited before logging %q", msg)
			}
			if m["msg"] == msg {
				return m
			}
		case <-timeout:
			t.Fatalf("keycap never logged %q", msg)
		}
	}
}

// wait waits up to d for the process to exit, and kills it after that.
func (g *gw) wait(d time.Duration) error {
	select {
	case <-g.exited:
		return g.exitErr
	case <-time.After(d):
		_ = g.cmd.Process.Kill()
		return fmt.Errorf("still running after %s: killed", d)
	}
}

func (g *gw) signal(t *testing.T, s os.Signal) {
	t.Helper()
	if err := g.cmd.Process.Signal(s); err != nil {
		t.Fatal(err)
	}
}

// testClient bounds every request of a test.
var testClient = &http.Client{Timeout: 30 * time.Second}

func get(t *testing.T, url string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestCapAcrossTwoGateways: many clients through two gateway processes that
// share Redis; the upstream counts its own concurrency per user: never above
// the cap of 3.
func TestCapAcrossTwoGateways(t *testing.T) {
	t.Parallel()
	conc := testkit.NewConcurrency()
	var served atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := r.Header.Get("X-User")
		conc.Enter(u)
		time.Sleep(10 * time.Millisecond) // the work
		conc.Leave(u)
		served.Add(1)
	}))
	defer up.Close()
	prefix := testenv.Prefix(t, testenv.Redis(t))
	// A generous budget: this test asserts exactness on a machine loaded by
	// parallel tests, where a short budget could let a request through
	// failing open.
	config := fmt.Sprintf(`upstream: %s
store: {type: redis, url: "redis://%s", prefix: "%s", budget: 10s}
routes:
  - name: api
    path: /
    limits: [{max: 3, key: "header:X-User"}]
`, up.URL, testenv.RedisAddr(), prefix)
	gws := []*gw{startGateway(t, config), startGateway(t, config)}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for c := range 100 {
		wg.Go(func() {
			for i := range 10 {
				req, _ := http.NewRequest(http.MethodGet, gws[(c+i)%2].proxy+"/x", nil)
				req.Header.Set("X-User", strconv.Itoa(c%10))
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200:
					ok.Add(1)
				case resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "1":
					refused.Add(1)
				default:
					t.Errorf("status %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d served, %d refused", ok.Load(), refused.Load())
	for u, p := range conc.Peaks() {
		if p > 3 {
			t.Errorf("user %s: %d requests in flight upstream, cap 3", u, p)
		}
	}
	if refused.Load() == 0 || ok.Load() != served.Load() {
		t.Fatalf("%d refusals; %d 200s for %d upstream answers", refused.Load(), ok.Load(), served.Load())
	}
}

// streamUpstream streams server-sent events until the test says stop, and
// reports when each stream starts and ends.
type streamUpstream struct {
	*httptest.Server
	started, ended chan struct{}
	stop           chan struct{}
}

func newStreamUpstream(t *testing.T) *streamUpstream {
	s := &streamUpstream{started: make(chan struct{}, 10), ended: make(chan struct{}, 10), stop: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/events" {
			return
		}
		defer func() { s.ended <- struct{}{} }()
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		s.started <- struct{}{}
		for i := 0; ; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			if rc.Flush() != nil {
				return
			}
			select {
			case <-s.stop:
				return
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func wait(t *testing.T, c chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestStreamHoldsItsSlotAndDisconnectFreesIt: a server-sent event stream
// through the gateway holds its slot (renewed past its TTL) until it ends; a
// client that disconnects mid-stream frees its slot.
func TestStreamHoldsItsSlotAndDisconnectFreesIt(t *testing.T) {
	t.Parallel()
	up := newStreamUpstream(t)
	g := startGateway(t, fmt.Sprintf(`upstream: %s
routes:
  - name: events
    path: /events
    limits: [{max: 1, key: "header:X-User", ttl: 300ms}]
`, up.URL))
	// A stream, read as it comes: unbuffered through the proxy.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.proxy+"/events", nil)
	req.Header.Set("X-User", "alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, up.started, "the stream")
	r := bufio.NewReader(resp.Body)
	if line, _ := r.ReadString('\n'); line != "data: 0\n" {
		t.Fatalf("first event %q", line)
	}
	time.Sleep(time.Second) // outlive the 300 ms TTL: only renewals keep the slot
	if code, _, _ := get(t, g.proxy+"/events", "X-User", "alice"); code != 429 {
		t.Fatalf("during the stream: %d, want 429", code)
	}
	// The client goes away mid-stream: the gateway's upstream request ends,
	// and the slot is freed.
	cancel()
	resp.Body.Close()
	wait(t, up.ended, "the upstream to see the client go")
	deadline := time.Now().Add(5 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, g.proxy+"/events", nil)
		req.Header.Set("X-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 200 {
			wait(t, up.started, "the second stream")
			close(up.stop) // the second stream ends by itself
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("the disconnected client's slot was not freed")
		}
		time.Sleep(20 * time.Millisecond) // the release follows the handler's return
	}
	// After a stream that ended, the slot is free again.
	if code, _, _ := get(t, g.proxy+"/events", "X-User", "alice"); code != 200 {
		t.Fatalf("after the stream ended: %d", code)
	}
}

// TestUpstreamDownIs502WithoutLeakingSlots.
func TestUpstreamDownIs502WithoutLeakingSlots(t *testing.T) {
	t.Parallel()
	dead := deadURL(t)
	g := startGateway(t, fmt.Sprintf(`upstream: %s
routes:
  - name: all
    path: /
    limits: [{max: 1}]
`, dead))
	for i := range 5 {
		code, h, _ := get(t, g.proxy+"/x")
		if code != http.StatusBadGateway {
			t.Fatalf("request %d: %d, want 502 (a leaked slot would give 429)", i, code)
		}
		if h.Get("X-Request-Id") == "" {
			t.Fatal("no X-Request-Id")
		}
	}
}

// TestRequestIDIsForwarded.
func TestRequestIDIsForwarded(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 2)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Get("X-Request-Id") }))
	defer up.Close()
	g := startGateway(t, "upstream: "+up.URL+"\n")
	if _, h, _ := get(t, g.proxy+"/", "X-Request-Id", "abc-123"); h.Get("X-Request-Id") != "abc-123" || testkit.Recv(t, seen, 5*time.Second, "the upstream's request") != "abc-123" {
		t.Fatal("a client's request id is not kept")
	}
	_, h, _ := get(t, g.proxy+"/")
	if id := testkit.Recv(t, seen, 5*time.Second, "the upstream's request"); id == "" || h.Get("X-Request-Id") != id {
		t.Fatalf("generated id %q upstream, %q to the client", id, h.Get("X-Request-Id"))
	}
}

// TestReload: SIGHUP swaps in a new file atomically; a bad file keeps the
// old configuration.
func TestReload(t *testing.T) {
	t.Parallel()
	up := newStreamUpstream(t)
	config := func(max int) string {
		return fmt.Sprintf("upstream: %s\nroutes:\n  - name: events\n    path: /events\n    limits: [{max: %d, key: \"header:X-User\"}]\n", up.URL, max)
	}
	g := startGateway(t, config(1))
	hold := func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.proxy+"/events", nil)
		req.Header.Set("X-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v %v", err, resp)
		}
		wait(t, up.started, "a stream")
		return func() { cancel(); resp.Body.Close(); wait(t, up.ended, "the stream's end") }
	}
	release := hold()
	if code, _, _ := get(t, g.proxy+"/events", "X-User", "alice"); code != 429 {
		t.Fatalf("max 1: %d", code)
	}
	write := func(s string) {
		full := "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nshutdown_timeout: 10s\nlog: {level: debug}\n" + s
		if err := os.WriteFile(g.file, []byte(full), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(config(2))
	g.signal(t, syscall.SIGHUP)
	g.waitLog(t, "keycap: configuration reloaded")
	release2 := hold() // the held slot carried over; max 2 admits a second
	if code, _, _ := get(t, g.proxy+"/events", "X-User", "alice"); code != 429 {
		t.Fatalf("max 2 with two held: %d", code)
	}
	write("upstream: not a url\nroutes: [{name: x}]\n")
	g.signal(t, syscall.SIGHUP)
	m := g.waitLog(t, "keycap: reload failed, keeping the current configuration")
	if !strings.Contains(fmt.Sprint(m["error"]), "upstream") {
		t.Fatalf("the log does not say why: %v", m)
	}
	if code, _, _ := get(t, g.proxy+"/events", "X-User", "alice"); code != 429 {
		t.Fatalf("after a bad reload the old configuration must serve: %d", code)
	}
	release()
	release2()
}

// TestGracefulShutdown: SIGTERM lets a request in flight finish; durations
// in the logs are in seconds.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	entered, finish := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(finish) }) }
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-finish:
		case <-time.After(20 * time.Second):
		}
		_, _ = io.WriteString(w, "done")
	}))
	defer up.Close()
	defer release() // before up.Close: a failed test must not leave the handler blocked
	g := startGateway(t, "upstream: "+up.URL+"\n")
	got := make(chan string, 1)
	go func() {
		_, _, body := doGet(g.proxy + "/slow")
		got <- body
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	g.signal(t, syscall.SIGTERM)
	m := g.waitLog(t, "keycap: shutting down")
	if m["timeout"] != 10.0 {
		t.Errorf("shutdown timeout logged as %v, want 10 (seconds)", m["timeout"])
	}
	release()
	select {
	case body := <-got:
		if body != "done" {
			t.Fatalf("the request in flight got %q", body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the request in flight was not drained")
	}
	if err := g.wait(15 * time.Second); err != nil {
		t.Fatalf("keycap exited with %v", err)
	}
}

// TestShutdownSaysWhatWasCut: a shutdown cut short by shutdown_timeout says
// how many requests it cut off.
func TestShutdownSaysWhatWasCut(t *testing.T) {
	t.Parallel()
	entered, finish := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-finish:
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
	}))
	defer up.Close()
	defer close(finish)
	g := startGateway(t, "upstream: "+up.URL+"\nshutdown_timeout: 300ms\n")
	go func() { _, _, _ = doGet(g.proxy + "/never") }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	g.signal(t, syscall.SIGTERM)
	m := g.waitLog(t, "keycap: shutdown cut requests short")
	if m["requests"] != 1.0 || m["timeout"] != 0.3 {
		t.Errorf("logged %v", m)
	}
	if err := g.wait(15 * time.Second); err == nil {
		t.Error("keycap exited 0 after cutting a request short")
	}
}

// TestHealthAndReadiness: /healthz always; /readyz while the store answers,
// and while it does not as long as the gateway can serve something — an
// uncapped path, a limit failing open, WebSockets failing open — so that a
// Redis blip does not make a load balancer pull every gateway.
func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	deadRedis := ln.Addr().String()
	_ = ln.Close()
	pusher := "pusher: {apps: [{id: '1', key: k, secret: s}]}\n" // fails closed by default
	for _, tc := range []struct {
		name, redis, failMode, path, extra string
		ready                              int
	}{
		{"store up", testenv.RedisAddr(), "closed", "/", "", 200},
		{"store down, everything fails closed", deadRedis, "closed", "/", "", 503},
		{"store down, fails open", deadRedis, "open", "/", "", 200},
		{"store down, an uncapped catch-all serves", deadRedis, "closed", "/r", "", 200},
		{"store down, HTTP open, WebSockets closed", deadRedis, "open", "/", pusher, 200},
		{"store down, HTTP and WebSockets closed", deadRedis, "closed", "/", pusher, 503},
	} {
		g := startGateway(t, fmt.Sprintf(`upstream: %s
store: {type: redis, url: "redis://%s", fail_mode: %s}
routes: [{name: r, path: %s, limits: [{max: 1}]}]
%s`, up.URL, tc.redis, tc.failMode, tc.path, tc.extra))
		if code, _, _ := get(t, g.admin+"/healthz"); code != 200 {
			t.Errorf("healthz: %d", code)
		}
		if code, _, body := get(t, g.admin+"/readyz"); code != tc.ready {
			t.Errorf("%s: readyz %d %q, want %d", tc.name, code, body, tc.ready)
		}
		if code, _, body := get(t, g.admin+"/metrics"); code != 200 || !strings.Contains(body, "keycap_store_up") {
			t.Errorf("metrics: %d", code)
		}
	}
}

// TestPusherJSAcrossTwoGateways: real pusher-js clients through two gateway
// processes sharing Redis, to a Pusher-protocol upstream: capped at 2 per
// user across both.
func TestPusherJSAcrossTwoGateways(t *testing.T) {
	t.Parallel()
	app := pusherserver.App{ID: "1", Key: "app-key", Secret: "app-secret"}
	upstream := pusherserver.New(nil, app)
	up := httptest.NewServer(upstream)
	defer up.Close()
	prefix := testenv.Prefix(t, testenv.Redis(t))
	config := fmt.Sprintf(`upstream: %s
store: {type: redis, url: "redis://%s", prefix: "%s"}
pusher:
  default_cap: 2
  apps: [{id: "1", key: app-key, secret: app-secret}]
`, up.URL, testenv.RedisAddr(), prefix)
	one, two := startGateway(t, config), startGateway(t, config)
	port := func(g *gw) int {
		_, p, _ := net.SplitHostPort(strings.TrimPrefix(g.proxy, "http://"))
		n, _ := strconv.Atoi(p)
		return n
	}
	node := testenv.RunNode(t, "cap.mjs", map[string]any{
		"host": "127.0.0.1", "key": app.Key, "secret": app.Secret, "observeMs": 10_000,
		"ports": map[string]int{"a": port(one), "b": port(one), "c": port(two), "forged": port(two)},
	})
	if m := node.Next(t, 90*time.Second); string(m["step"]) != `"broadcast"` {
		t.Fatalf("unexpected line %v", m)
	}
	if n := upstream.Upgrades(); n != 4 {
		t.Fatalf("the upstream saw %d connections, want 4: the refused client reconnected", n)
	}
	upstream.Broadcast("presence-room", "hello", `{"msg":"still here"}`)
	testenv.CheckCapResult(t, node.Result(t, 30*time.Second))
}

// deadURL returns the URL of a loopback port nothing listens on: an
// upstream that refuses every connection.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}

func runBinary(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	return string(out), err
}

// TestTheMainJob runs the README's main job: the gateway on
// examples/gateway.yaml, with its demo upstream, and keycap try against it.
// The greedy client must get its 2 slots and 6 refusals while the other two
// are served in full.
func TestTheMainJob(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../../examples/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	demo := ln.Addr().String()
	ln.Close()
	config := string(raw)
	for old, new := range map[string]string{
		"listen: 127.0.0.1:8080": "listen: 127.0.0.1:0",
		"admin: 127.0.0.1:9091":  "admin: 127.0.0.1:0",
		"127.0.0.1:8081":         demo,
	} {
		if !strings.Contains(config, old) {
			t.Fatalf("examples/gateway.yaml has no %q any more: update this test and the README", old)
		}
		config = strings.ReplaceAll(config, old, new)
	}
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	g := runGateway(t, file)
	out, err := exec.Command(binary, "try", "-url", g.proxy+"/report").CombinedOutput()
	if err != nil {
		t.Fatalf("keycap try: %v\n%s", err, out)
	}
	for _, want := range []string{"alice       2       6", "bob         3       0", "carol       3       0"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("keycap try printed no %q:\n%s", want, out)
		}
	}
}

// TestCommandLine: help lists the commands and exits 0; a missing
// configuration file says what to do.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		out, err := runBinary(t, args...)
		if err != nil || !strings.Contains(out, "keycap check [-config] FILE") || !strings.Contains(out, "keycap try") {
			t.Errorf("keycap %v: %v\n%s", args, err, out)
		}
	}
	cmd := exec.Command(binary)
	cmd.Dir = t.TempDir() // no keycap.yaml here
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no configuration file keycap.yaml") || !strings.Contains(string(out), "examples/gateway.yaml") {
		t.Errorf("bare keycap: %v\n%s", err, out)
	}
	if out, err := runBinary(t, "check", "-h"); err != nil || !strings.Contains(out, "-config") {
		t.Errorf("keycap check -h: %v\n%s", err, out)
	}
	// keycap help COMMAND is the command's own help.
	if out, err := runBinary(t, "help", "try"); err != nil || !strings.Contains(out, "Usage: keycap try") || !strings.Contains(out, "-token") {
		t.Errorf("keycap help try: %v\n%s", err, out)
	}
	// version: the module's version and the Go that built it.
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		out, err := runBinary(t, args...)
		if err != nil || !strings.HasPrefix(out, "keycap ") || !strings.Contains(out, runtime.Version()) {
			t.Errorf("keycap %v: %v\n%s", args, err, out)
		}
	}
	// The configuration file as the argument, to check and to serve.
	example := "../../../../examples/gateway.yaml"
	if out, err := runBinary(t, "check", example); err != nil || !strings.Contains(out, "configuration OK") {
		t.Errorf("keycap check FILE: %v\n%s", err, out)
	}
	if out, err := runBinary(t, "check", "-config", example, "other.yaml"); err == nil || !strings.Contains(out, "give one") {
		t.Errorf("keycap check with two files: %v\n%s", err, out)
	}
	if out, err := runBinary(t, filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(out, "no configuration file") {
		t.Errorf("keycap FILE, missing: %v\n%s", err, out)
	}
}

// TestH2C: with server.h2c the proxy speaks HTTP/2 without TLS too.
func TestH2C(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer up.Close()
	g := startGateway(t, "upstream: "+up.URL+"\nserver: {h2c: true}\nroutes: [{name: r, path: /r, limits: [{max: 1}]}]\n")
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(g.proxy + "/r")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(body) != "ok" {
		t.Fatalf("%s %d %q, want HTTP/2 and the upstream's answer", resp.Proto, resp.StatusCode, body)
	}
}

// TestFenceGoesUpstream: a limit with fence: true sends each grant's
// fencing token upstream in Keycap-Fence, growing request after request;
// a client's own Keycap-Fence never reaches the upstream.
func TestFenceGoesUpstream(t *testing.T) {
	t.Parallel()
	seen := make(chan []string, 3)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Values("Keycap-Fence") }))
	defer up.Close()
	g := startGateway(t, fmt.Sprintf(`upstream: %s
routes:
  - name: ledger
    path: /
    limits:
      - {max: 1, key: "header:X-Account", fence: true}
`, up.URL))
	var last uint64
	for i := range 3 {
		if code, _, body := get(t, g.proxy+"/", "X-Account", "7", "Keycap-Fence", "ledger=99999999999999999"); code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		v := testkit.Recv(t, seen, 5*time.Second, "the upstream's request")
		name, tok, ok := strings.Cut(strings.Join(v, ","), "=")
		n, err := strconv.ParseUint(tok, 10, 64)
		if len(v) != 1 || !ok || name != "ledger" || err != nil || n <= last || n == 99999999999999999 {
			t.Fatalf("request %d: Keycap-Fence %q upstream, want one token of ledger above %d", i, v, last)
		}
		last = n
	}
}
