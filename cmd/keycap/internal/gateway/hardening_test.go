package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
	"github.com/keycap/keycap/internal/pusherserver"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/pushercap"
)

// logBuffer is a slog handler's output that tests can search.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// inProcess builds a gateway from config and serves it; its logs (debug
// and up) are returned too.
func inProcess(t *testing.T, config string) (*httptest.Server, *logBuffer) {
	t.Helper()
	cfg, err := gateway.ParseConfig("test.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	g, err := gateway.New(cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		g.Close() // closes WebSockets first, so that srv.Close has nothing to wait for
		srv.Close()
	})
	return srv, logs
}

var testApp = pusherserver.App{ID: "1", Key: "app-key", Secret: "app-secret"}

// normalising serves h after cleaning the path as soketi and most servers do:
// %2F decoded, dot segments and slashes resolved, a trailing slash dropped.
func normalising(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := url.PathUnescape(r.URL.EscapedPath())
		r.URL.Path, r.URL.RawPath = path.Clean(p), ""
		h.ServeHTTP(w, r)
	})
}

// pusherConn is a Go Pusher client's connection, for the tests.
type pusherConn struct {
	ws       *websocket.Conn
	socketID string
}

// dialPusher connects to rawURL (its path sent exactly as written) and
// waits for pusher:connection_established.
func dialPusher(t *testing.T, rawURL string, hdr http.Header) (*pusherConn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, rawURL, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	ev := readEvent(t, ws)
	if ev.Event != "pusher:connection_established" {
		t.Fatalf("first frame %+v", ev)
	}
	var d struct {
		SocketID string `json:"socket_id"`
	}
	var s string
	_ = json.Unmarshal(ev.Data, &s)
	_ = json.Unmarshal([]byte(s), &d)
	return &pusherConn{ws: ws, socketID: d.SocketID}, resp, nil
}

type event struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

// readEvent reads one frame, within 5 s; a closed connection gives an
// event "closed" whose data is the close code.
func readEvent(t *testing.T, ws *websocket.Conn) event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, data, err := ws.Read(ctx)
	if err != nil {
		return event{Event: "closed", Data: json.RawMessage(fmt.Sprint(int(websocket.CloseStatus(err))))}
	}
	var ev event
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatalf("frame %q: %v", data, err)
	}
	return ev
}

// joinPresence subscribes c to presence-room as user and returns the reply.
func (c *pusherConn) joinPresence(t *testing.T, user string) event {
	t.Helper()
	cd := fmt.Sprintf(`{"user_id":%q}`, user)
	f, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{
		"channel": "presence-room", "channel_data": cd,
		"auth": pushercap.Sign(testApp.Key, testApp.Secret, c.socketID+":presence-room:"+cd),
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, f); err != nil {
		return event{Event: "closed"}
	}
	return readEvent(t, c.ws)
}

func wsURL(srv *httptest.Server, p string) string {
	return "ws" + strings.TrimPrefix(srv.URL, "http") + p
}

// TestPusherPathVariantsCannotBypassTheCap: every spelling of /app/{key}
// that an upstream would serve as the app's endpoint is either capped or
// refused. With a cap of 1, one user tries the variants that got three
// connections admitted uncapped before.
func TestPusherPathVariantsCannotBypassTheCap(t *testing.T) {
	t.Parallel()
	upstream := pusherserver.New(nil, testApp)
	up := httptest.NewServer(normalising(upstream))
	defer up.Close()
	srv, _ := inProcess(t, fmt.Sprintf(`upstream: %s
pusher:
  default_cap: 1
  apps: [{id: "1", key: app-key, secret: app-secret}]
`, up.URL))
	first, _, err := dialPusher(t, wsURL(srv, "/app/app-key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev := first.joinPresence(t, "mallory"); ev.Event != "pusher_internal:subscription_succeeded" {
		t.Fatalf("first connection: %+v", ev)
	}
	for _, variant := range []string{
		"/app/app-key%2F", "/app/app-key%2f", "/app/app-key/", "/app/app-key/x/..", "/app/./app-key",
		"//app/app-key", "/app//app-key", "/APP/app-key", "/App/app-key/", "/app/%61pp-key", "/app/app-key%00",
		"/app/app-key/.", "/app/x/../app-key", "/app/app-key%5C", "/app\\app-key", "/app/APP-KEY",
	} {
		c, resp, err := dialPusher(t, wsURL(srv, variant), nil)
		if err != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			if status != http.StatusBadRequest && status != http.StatusNotFound {
				t.Errorf("%s: refused with %d %v, want 400 or 404", variant, status, err)
			}
			continue
		}
		if ev := c.joinPresence(t, "mallory"); ev.Event != "pusher:error" {
			t.Errorf("%s: a second connection of the user got %+v, want the cap's pusher:error", variant, ev)
		}
	}
	if n := upstream.Subscribers("presence-room"); n != 1 {
		t.Fatalf("the upstream has %d members of presence-room, want 1: a variant bypassed the cap", n)
	}
}

// TestHTTPPathVariantsAreCapped: a capped route's path in another case,
// with a trailing slash, with escapes or dot segments, counts in the route's
// pool; paths the gateway cannot read as the upstream would are refused.
func TestHTTPPathVariantsAreCapped(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var paths sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths.Store(r.URL.EscapedPath(), true)
		if r.URL.Query().Get("hold") != "" {
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
	}))
	defer up.Close()
	srv, _ := inProcess(t, fmt.Sprintf(`upstream: %s
routes: [{name: report, path: /report, limits: [{max: 1, key: "header:X-User"}]}]
`, up.URL))
	defer close(release)
	held := make(chan int, 1)
	go func() {
		code, _, _ := doGet(srv.URL+"/report?hold=1", "X-User", "u")
		held <- code
	}()
	// Wait for the held request to reach the upstream.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := paths.Load("/report"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held request never reached the upstream")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, variant := range []string{"/report/", "/Report", "/REPORT/", "/%72eport", "/./report", "//report", "/x/../report"} {
		if code, _, body := doGet(srv.URL+variant, "X-User", "u"); code != http.StatusTooManyRequests {
			t.Errorf("%s: %d %q, want 429: the variant is not capped with /report", variant, code, body)
		}
	}
	for _, bad := range []string{"/report%2Fx", "/a%5Cb", "/a\\b", "/a%00"} {
		if code, _, _ := doGet(srv.URL+bad, "X-User", "u"); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}
	// What the upstream receives is the canonical path the gateway decided on.
	if code, _, _ := doGet(srv.URL+"/a/./b//c/%7Eme", "X-User", "v"); code != http.StatusOK {
		t.Fatalf("plain path: %d", code)
	}
	if _, ok := paths.Load("/a/b/c/~me"); !ok {
		t.Error("the upstream did not receive the canonical path /a/b/c/~me")
	}
}

func doGet(u string, header ...string) (int, http.Header, string) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err.Error()
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{Timeout: 15 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestMissingKeysNeverAnswer500: a request without the header, cookie or
// token its limits read is counted by its address in a pool of its own (or
// refused with 401 when the limit says so); two limits of a route never
// share a pool, even when their values are equal.
func TestMissingKeysNeverAnswer500(t *testing.T) {
	t.Parallel()
	secret := "0123456789abcdef0123456789abcdef"
	release := make(chan struct{})
	var inflight atomic.Int64
	entered := make(chan struct{}, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") != "" {
			inflight.Add(1)
			entered <- struct{}{}
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
	}))
	defer up.Close()
	srv, logs := inProcess(t, fmt.Sprintf(`upstream: %s
jwt: {hs256_secret: %s}
routes:
  - name: reports
    path: /report
    limits: [{max: 2, key: "header:X-User"}, {max: 20, key: ip}]
  - name: exports
    path: /export
    limits: [{max: 1, key: "claim:sub"}, {max: 2, key: "claim:tenant_id"}]
  - name: strict
    path: /strict
    limits: [{max: 1, key: "claim:sub", on_missing: refuse}]
`, up.URL, secret))
	defer close(release)
	token := func(claims jwt.MapClaims) string {
		claims["exp"] = time.Now().Add(time.Hour).Unix()
		s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		return "Bearer " + s
	}
	for _, tc := range []struct {
		name, path string
		header     []string
		want       int
	}{
		{"quick-start route without X-User", "/report", nil, 200},
		{"claims, no token", "/export", nil, 200},
		{"claims, a token that does not verify", "/export", []string{"Authorization", "Bearer a.b.c"}, 200},
		{"claims, sub equal to tenant_id", "/export", []string{"Authorization", token(jwt.MapClaims{"sub": "7", "tenant_id": "7"})}, 200},
		{"claims, numeric and equal", "/export", []string{"Authorization", token(jwt.MapClaims{"sub": 7, "tenant_id": 7})}, 200},
		{"on_missing: refuse, no token", "/strict", nil, 401},
		{"on_missing: refuse, lower-case bearer", "/strict", []string{"Authorization", "bearer " + strings.TrimPrefix(token(jwt.MapClaims{"sub": "x"}), "Bearer ")}, 200},
	} {
		if code, hdr, body := doGet(srv.URL+tc.path, tc.header...); code != tc.want {
			t.Errorf("%s: %d %q, want %d", tc.name, code, body, tc.want)
		} else if code == 401 && hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		}
	}
	// Tenant 42 holds its two slots; user 42 of tenant 7 is not refused by
	// them (before, user 42's pool was tenant 42's).
	done := make(chan int, 3)
	for _, sub := range []string{"a", "b"} {
		go func() {
			code, _, _ := doGet(srv.URL+"/export?hold=1", "Authorization", token(jwt.MapClaims{"sub": sub, "tenant_id": "42"}))
			done <- code
		}()
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("tenant 42's requests never reached the upstream")
		}
	}
	if code, _, body := doGet(srv.URL+"/export", "Authorization", token(jwt.MapClaims{"sub": "42", "tenant_id": "7"})); code != 200 {
		t.Fatalf("user 42 of tenant 7: %d %q while tenant 42 is full", code, body)
	}
	if code, _, _ := doGet(srv.URL+"/export", "Authorization", token(jwt.MapClaims{"sub": "c", "tenant_id": "42"}), "X-Request-Id", "refused-1"); code != 429 {
		t.Fatalf("a third request of tenant 42: %d, want 429", code)
	}
	// The refusal is logged with the request's id and its route.
	l := logs.String()
	if !strings.Contains(l, `"msg":"keycap: request refused","route":"exports","request_id":"refused-1"`) {
		t.Errorf("no refusal log line with the route and the request id:\n%s", l)
	}
}

// TestForwardedForFollowsTheTrustedProxyRule: HTTP requests and WebSocket
// upgrades reach the upstream with the same X-Forwarded-For: a client's
// spoofed value is dropped.
func TestForwardedForFollowsTheTrustedProxyRule(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]string{}
	pusher := pusherserver.New(nil, testApp)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = strings.Join(r.Header.Values("X-Forwarded-For"), "|")
		mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/app/") {
			pusher.ServeHTTP(w, r)
		}
	}))
	defer up.Close()
	srv, _ := inProcess(t, fmt.Sprintf(`upstream: %s
routes: [{name: r, path: /r, limits: [{max: 5}]}]
pusher: {apps: [{id: "1", key: app-key, secret: app-secret}]}
`, up.URL))
	if code, _, _ := doGet(srv.URL+"/r", "X-Forwarded-For", "6.6.6.6"); code != 200 {
		t.Fatalf("GET /r: %d", code)
	}
	if _, _, err := dialPusher(t, wsURL(srv, "/app/app-key"), http.Header{"X-Forwarded-For": {"6.6.6.6"}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"/r", "/app/app-key"} {
		if seen[p] != "127.0.0.1" {
			t.Errorf("%s reached the upstream with X-Forwarded-For %q, want 127.0.0.1", p, seen[p])
		}
	}
}

// TestHandshakeIsCheckedBeforeTheUpstreamIsDialled: plain GETs to the
// Pusher endpoint never cost the upstream a handshake.
func TestHandshakeIsCheckedBeforeTheUpstreamIsDialled(t *testing.T) {
	t.Parallel()
	upstream := pusherserver.New(nil, testApp)
	up := httptest.NewServer(upstream)
	defer up.Close()
	srv, _ := inProcess(t, fmt.Sprintf("upstream: %s\npusher: {apps: [{id: \"1\", key: app-key, secret: app-secret}]}\n", up.URL))
	for _, tc := range []struct {
		header []string
		want   int
	}{
		{nil, 426},
		{[]string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "8"}, 426},
		{[]string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "short"}, 400},
	} {
		if code, _, _ := doGet(srv.URL+"/app/app-key", tc.header...); code != tc.want {
			t.Errorf("%v: %d, want %d", tc.header, code, tc.want)
		}
	}
	if n := upstream.Upgrades(); n != 0 {
		t.Fatalf("the upstream saw %d handshakes for requests that were not WebSocket handshakes", n)
	}
}

// TestWebSocketFrameLimits: a client frame over max_message closes the
// connection (1009), invalid UTF-8 in a text frame closes it (1007), and a
// client is read no faster than messages_per_second.
func TestWebSocketFrameLimits(t *testing.T) {
	t.Parallel()
	var received atomic.Int64
	var first, last atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		_ = ws.Write(r.Context(), websocket.MessageText, []byte(`{"event":"pusher:connection_established","data":"{\"socket_id\":\"1.1\"}"}`))
		for {
			if _, _, err := ws.Read(r.Context()); err != nil {
				return
			}
			now := time.Now().UnixNano()
			first.CompareAndSwap(0, now)
			last.Store(now)
			received.Add(1)
		}
	}))
	defer up.Close()
	srv, _ := inProcess(t, fmt.Sprintf(`upstream: %s
pusher:
  max_message: 4KiB
  messages_per_second: 50
  message_burst: 5
  apps: [{id: "1", key: app-key, secret: app-secret}]
`, up.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, _, err := dialPusher(t, wsURL(srv, "/app/app-key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.ws.Write(ctx, websocket.MessageText, bytes.Repeat([]byte("x"), 5<<10))
	if ev := readEvent(t, c.ws); ev.Event != "closed" || string(ev.Data) != "1009" {
		t.Errorf("a 5 KiB frame: %+v, want closed with 1009", ev)
	}

	c, _, err = dialPusher(t, wsURL(srv, "/app/app-key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.ws.Write(ctx, websocket.MessageText, []byte{'"', 0xff, 0xfe, '"'})
	if ev := readEvent(t, c.ws); ev.Event != "closed" || string(ev.Data) != "1007" {
		t.Errorf("invalid UTF-8: %+v, want closed with 1007", ev)
	}

	received.Store(0)
	c, _, err = dialPusher(t, wsURL(srv, "/app/app-key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	for range n {
		if err := c.ws.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:ping","data":{}}`)); err != nil {
			t.Fatal(err)
		}
	}
	for received.Load() < n {
		if ctx.Err() != nil {
			t.Fatalf("the upstream received %d of %d frames", received.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// 30 frames at 50/s with a burst of 5: the last 25 take at least 0.5 s.
	if took := time.Duration(last.Load() - first.Load()); took < 400*time.Millisecond {
		t.Fatalf("%d frames relayed in %s: faster than messages_per_second", n, took)
	}
}

// TestServerLimits: idle keep-alive connections are closed, a trickled body
// is cut off, and one address cannot hold more than max_connections_per_ip.
func TestServerLimits(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	defer up.Close()
	g := startGateway(t, fmt.Sprintf(`upstream: %s
server:
  idle_timeout: 300ms
  body_read_timeout: 300ms
  max_connections_per_ip: 5
`, up.URL))
	addr := strings.TrimPrefix(g.proxy, "http://")

	// Idle: a keep-alive connection is closed after idle_timeout.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := br.ReadByte(); err == nil || isTimeoutErr(err) {
		t.Fatalf("an idle keep-alive connection was not closed: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("idle connection closed after %s", took)
	}

	// Trickle: a body that stops coming is cut off, and so is one that
	// comes a byte at a time, too slowly.
	trickler, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer trickler.Close()
	_, _ = io.WriteString(trickler, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
	stopTrickle := make(chan struct{})
	defer close(stopTrickle)
	go func() {
		for {
			select {
			case <-stopTrickle:
				return
			case <-time.After(100 * time.Millisecond): // faster than body_read_timeout, slower than min_body_rate
				if _, err := trickler.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	_ = trickler.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(trickler); isTimeoutErr(err) {
		t.Fatal("a body trickled a byte every 100ms was never cut off")
	}
	conn2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	_, _ = io.WriteString(conn2, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
	_ = conn2.SetReadDeadline(time.Now().Add(5 * time.Second))
	start = time.Now()
	// The answer is 408, or the upstream's own to the truncated body it
	// received; either way the connection is closed.
	got, err := io.ReadAll(conn2)
	if isTimeoutErr(err) {
		t.Fatal("a trickled body was never cut off")
	}
	if !strings.Contains(string(got), "Connection: close") {
		t.Errorf("a trickled body got %q, want the connection closed", got)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("trickled body cut off after %s", took)
	}

	// Per address: at most 5 connections — once the ones above are gone
	// from the listener's count (on a busy machine the server may not have
	// seen them close yet).
	conn.Close()
	trickler.Close()
	conn2.Close()
	open := fmt.Sprintf("keycap_gateway_connections{listener=%q} 0", "proxy "+addr)
	testkit.WaitUntil(t, 10*time.Second, "the proxy listener to count no connection", func() bool {
		_, _, body := get(t, g.admin+"/metrics")
		return strings.Contains(body, open)
	})
	var conns []net.Conn
	for range 10 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	closed := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !isTimeoutErr(err) {
			closed++
		}
	}
	if closed != 5 {
		t.Fatalf("%d of 10 connections from one address were closed, want 5", closed)
	}
	if _, _, body := get(t, g.admin+"/metrics"); !strings.Contains(body, "keycap_gateway_connections_refused_total") {
		t.Error("no keycap_gateway_connections_refused_total metric")
	}
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestUpstreamTimeouts: an upstream that accepts and never answers costs a
// client response_header, then a 504 with a body, and its slot is released.
func TestUpstreamTimeouts(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-body" {
			w.WriteHeader(200)
			http.NewResponseController(w).Flush()
		}
		select {
		case <-stop:
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer up.Close()
	defer close(stop)
	srv, logs := inProcess(t, fmt.Sprintf(`upstream: %s
timeouts: {response_header: 300ms}
routes:
  - {name: hang, path: /hang, limits: [{max: 1}]}
  - {name: slow-body, path: /slow-body, timeouts: {total: 400ms}, limits: [{max: 1}]}
`, up.URL))
	for i := range 2 { // the second would be a 429 if the first kept its slot
		start := time.Now()
		code, hdr, body := doGet(srv.URL+"/hang", "Accept", "application/json", "X-Request-Id", fmt.Sprintf("req-%d", i))
		if code != http.StatusGatewayTimeout || !strings.Contains(body, `"message":"Gateway Timeout"`) || hdr.Get("Content-Type") != "application/json" {
			t.Fatalf("request %d: %d %q, want a 504 with a JSON body", i, code, body)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("request %d took %s", i, took)
		}
	}
	if !strings.Contains(logs.String(), `"request_id":"req-1"`) || !strings.Contains(logs.String(), `"route":"hang"`) {
		t.Errorf("the timeout's log line lacks the request id or the route:\n%s", logs)
	}
	// A total timeout cuts a response that started but never ends; the
	// slot is released too.
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/slow-body", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		ctxErr := ctx.Err()
		cancel()
		if resp.StatusCode != 200 || err == nil || ctxErr != nil {
			t.Fatalf("slow body: %d, read error %v, context %v: want a 200 cut short by the gateway", resp.StatusCode, err, ctxErr)
		}
	}
}

// TestUpstreamFailureBodies: a 502 has a body, as the 429 does.
func TestUpstreamFailureBodies(t *testing.T) {
	t.Parallel()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	_ = ln.Close()
	srv, logs := inProcess(t, fmt.Sprintf("upstream: http://%s\nroutes: [{name: r, path: /r, limits: [{max: 1}]}]\n", dead))
	code, _, body := doGet(srv.URL+"/r", "X-Request-Id", "id-502")
	if code != http.StatusBadGateway || body != "Bad Gateway\n" {
		t.Fatalf("%d %q, want 502 Bad Gateway with a body", code, body)
	}
	if l := logs.String(); !strings.Contains(l, `"request_id":"id-502"`) || !strings.Contains(l, `"route":"r"`) {
		t.Errorf("the upstream failure's log line lacks the request id or the route:\n%s", l)
	}
}

// TestAbandonAndRefireCannotBeatTheCap: a client that drops each request
// after a moment and fires again would keep many running at the upstream
// behind a cap of 2, if the slot were freed when the client goes. By default
// it is held until the upstream is done.
func TestAbandonAndRefireCannotBeatTheCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		release string
		capped  bool
	}{{"", true}, {"on_upstream_done", true}, {"on_client_done", false}} {
		t.Run("release="+tc.release, func(t *testing.T) {
			t.Parallel()
			var running, most atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(600 * time.Millisecond) // work that goes on when the client leaves
				_, _ = io.WriteString(w, "done")
			}))
			defer up.Close()
			release := ""
			if tc.release != "" {
				release = ", release: " + tc.release
			}
			srv, _ := inProcess(t, fmt.Sprintf("upstream: %s\nroutes: [{name: w, path: /w%s, limits: [{max: 2, key: \"header:X-User\", wait: 2s}]}]\n", up.URL, release))
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/w", nil)
					req.Header.Set("X-User", "greedy")
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			// Let the upstream finish what it started.
			deadline := time.Now().Add(10 * time.Second)
			for running.Load() > 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if m := most.Load(); tc.capped && m > 2 {
				t.Fatalf("the upstream ran %d at once behind a cap of 2", m)
			} else if !tc.capped && m <= 2 {
				t.Logf("on_client_done: the upstream ran %d at once (the trade-off did not show this run)", m)
			}
		})
	}
}

// TestStoreOutageLetsPusherClientsComeBack: failing closed while the store
// is down, a presence subscribe is refused with a code from which pusher-js
// reconnects after a back-off — not the cap's 4301, which ends its
// reconnecting — and the refusal is logged at debug.
func TestStoreOutageLetsPusherClientsComeBack(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(pusherserver.New(nil, testApp))
	defer up.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	_ = ln.Close()
	srv, logs := inProcess(t, fmt.Sprintf(`upstream: %s
store: {type: redis, url: "redis://%s"}
pusher: {apps: [{id: "1", key: app-key, secret: app-secret}]}
`, up.URL, dead))
	c, _, err := dialPusher(t, wsURL(srv, "/app/app-key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := c.joinPresence(t, "alice")
	var data struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if ev.Event != "pusher:error" || json.Unmarshal(ev.Data, &data) != nil || data.Code != pushercap.DefaultStoreErrorCode {
		t.Fatalf("got %+v (%+v), want pusher:error with data {code: %d}", ev, data, pushercap.DefaultStoreErrorCode)
	}
	if closed := readEvent(t, c.ws); closed.Event != "closed" || string(closed.Data) != fmt.Sprint(pushercap.DefaultStoreErrorCode) {
		t.Fatalf("then %+v, want closed with %d", closed, pushercap.DefaultStoreErrorCode)
	}
	if !strings.Contains(logs.String(), `"msg":"keycap: websocket refused"`) {
		t.Errorf("the refusal was not logged:\n%s", logs)
	}
}

// TestStoreNone: store type none turns the limits off — every request is
// served past any cap — while the metrics still count the slots.
func TestStoreNone(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 3)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	}))
	defer up.Close()
	defer close(release)
	srv, _ := inProcess(t, fmt.Sprintf("upstream: %s\nstore: {type: none}\nroutes: [{name: r, path: /, limits: [{max: 1}]}]\n", up.URL))
	for range 3 {
		go func() { _, _, _ = doGet(srv.URL + "/") }()
	}
	for i := range 3 {
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of 3 requests reached the upstream past a cap of 1 with the limits off", i)
		}
	}
}
