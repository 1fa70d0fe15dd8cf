package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
	"github.com/keycap/keycap/internal/pusherserver"
	"github.com/keycap/keycap/internal/testkit"
)

const testToken = "0123456789abcdef-admin"

// adminClient bounds every request of these tests: a gateway that stops
// answering fails the test in seconds.
var adminClient = &http.Client{Timeout: 10 * time.Second}

// heldUpstream answers /hold/... once released, and tells when each request
// arrived: the requests in flight the admin API counts.
type heldUpstream struct {
	*httptest.Server
	entered chan string
	release *testkit.Gate
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	u := &heldUpstream{entered: make(chan string, 100), release: testkit.NewGate()}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/hold") {
			u.entered <- r.Header.Get("X-Request-Id")
			u.release.Wait(20 * time.Second)
		}
		_, _ = io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(u.Close)
	t.Cleanup(u.release.Open) // before Close: a failed test leaves no handler blocked
	return u
}

// hold sends a request that the upstream holds until released; it returns
// once the request is at the upstream, and its status once it ends.
func (u *heldUpstream) hold(t *testing.T, url, user, id string) <-chan int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url+"/hold", nil)
		req.Header.Set("X-User", user)
		req.Header.Set("X-Request-Id", id)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req) // held up to 20 s by the upstream
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	if got := testkit.Recv(t, u.entered, 10*time.Second, "request "+id+" at the upstream"); got != id {
		t.Fatalf("request %q reached the upstream, want %q", got, id)
	}
	return done
}

func adminConfig(upstream string, extra string) string {
	return fmt.Sprintf(`upstream: %s
admin_api: {token: %s, overrides_refresh: 50ms}
routes:
  - name: api
    path: /
    limits:
      - {max: 3, key: "header:X-User"}
      - {max: 1, key: "header:X-User", shadow: true}
%s`, upstream, testToken, extra)
}

func adminDo(t *testing.T, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func summaryOf(t *testing.T, g *gw) gateway.Summary {
	t.Helper()
	status, b := adminDo(t, http.MethodGet, g.admin+"/admin/api/summary", testToken, nil)
	if status != http.StatusOK {
		t.Fatalf("summary: %d %s", status, b)
	}
	var s gateway.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("summary: %v: %s", err, b)
	}
	return s
}

func limitOf(t *testing.T, s gateway.Summary, pool string, shadow bool) gateway.LimitSummary {
	t.Helper()
	for _, l := range s.Limits {
		if l.Pool == pool && l.Shadow == shadow {
			return l
		}
	}
	t.Fatalf("no limit %q (shadow %v) in %+v", pool, shadow, s.Limits)
	return gateway.LimitSummary{}
}

// TestAdminAPIIsBehindItsToken: the admin API exists only on the admin
// listener and only with a token, and refuses requests without it.
func TestAdminAPIIsBehindItsToken(t *testing.T) {
	t.Parallel()
	up := newHeldUpstream(t)
	off := startGateway(t, "upstream: "+up.URL+"\n")
	// Off, the page and the API say how to turn them on, and so do the
	// start-up log and keycap inspect.
	if m := off.waitLog(t, "keycap: admin page and API off"); !strings.Contains(fmt.Sprint(m["turn_on"]), "admin_api.token") {
		t.Errorf("start-up log %v: want how to turn the page on", m)
	}
	for _, path := range []string{"/admin/api/summary", "/admin/", "/admin/login"} {
		if status, b := adminDo(t, http.MethodGet, off.admin+path, testToken, nil); status != http.StatusNotFound || !bytes.Contains(b, []byte("set admin_api.token")) {
			t.Fatalf("%s without admin_api.token: %d %s, want 404 saying how to turn it on", path, status, b)
		}
	}
	if out, err := runBinary(t, "inspect", "-admin", off.admin, "-token", testToken); err == nil || !strings.Contains(out, "set admin_api.token") {
		t.Fatalf("keycap inspect against a gateway without admin_api.token: %v\n%s", err, out)
	}
	g := startGateway(t, adminConfig(up.URL, ""))
	if m := g.waitLog(t, "keycap: admin page"); m["url"] != g.admin+"/admin/" {
		t.Errorf("start-up log %v: want the page's URL, %s/admin/", m, g.admin)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"wrong", 401}, {testToken + "x", 401}, {testToken, 200}} {
		if status, b := adminDo(t, http.MethodGet, g.admin+"/admin/api/summary", tc.token, nil); status != tc.want {
			t.Fatalf("token %q: %d %s, want %d", tc.token, status, b, tc.want)
		}
	}
	// The page sends a browser without the cookie to the login form.
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(g.admin + "/admin/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/admin/login" {
		t.Fatalf("page without a token: %d to %q, want 303 to /admin/login", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The login exchanges the token for a cookie the page takes, and the
	// API does not.
	resp, err = noRedirect.PostForm(g.admin+"/admin/login", map[string][]string{"token": {testToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d, cookies %+v; want 303 and one HttpOnly SameSite=Strict cookie", resp.StatusCode, cookies)
	}
	if strings.Contains(cookies[0].Value, testToken) {
		t.Fatal("the page's cookie carries the token itself")
	}
	for _, path := range []string{"/admin/", "/admin/api/summary"} {
		req, _ := http.NewRequest(http.MethodGet, g.admin+path, nil)
		req.AddCookie(cookies[0])
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[string]int{"/admin/": 200, "/admin/api/summary": 401}[path]; resp.StatusCode != want {
			t.Fatalf("%s with the cookie: %d, want %d", path, resp.StatusCode, want)
		}
	}
	// On the proxy port, /admin/ is the upstream's.
	if _, _, body := get(t, g.proxy+"/admin/api/summary", "Authorization", "Bearer "+testToken); body != "upstream /admin/api/summary" {
		t.Fatalf("the proxy port answered %q: the admin API must not be there", body)
	}
}

// TestAdminSummaryShadowAndOverrides: the summary counts the slots held per
// key on the route, its shadow candidate and its waiters; an override set
// through the API changes the cap at once and its reset restores it.
func TestAdminSummaryShadowAndOverrides(t *testing.T) {
	t.Parallel()
	up := newHeldUpstream(t)
	g := startGateway(t, adminConfig(up.URL, ""))
	var held []<-chan int
	for i, user := range []string{"alice", "alice", "bob"} {
		held = append(held, up.hold(t, g.proxy, user, fmt.Sprintf("req-%d", i)))
	}
	s := summaryOf(t, g)
	api := limitOf(t, s, "api", false)
	if api.InUse != 3 || api.Keys != 2 || api.Max != "3" || len(api.Busiest) != 2 {
		t.Fatalf("api: %+v; want 3 slots of 2 keys, max 3", api)
	}
	if b := api.Busiest[0]; b.Key != "header:X-User=alice" || b.Held != 2 || b.Max != 3 {
		t.Fatalf("busiest key %+v, want alice holding 2 of 3", b)
	}
	shadow := limitOf(t, s, "api", true)
	// The shadow cap of 1 per user admits alice's first and bob's, and
	// would have refused alice's second.
	if shadow.InUse != 2 || shadow.Refusals != 1 || shadow.Max != "1" {
		t.Fatalf("shadow: %+v; want 2 slots held and 1 refusal", shadow)
	}

	// The pools page shows the holders with their request IDs.
	status, b := adminDo(t, http.MethodGet, g.admin+"/admin/api/pools?route=api", testToken, nil)
	if status != http.StatusOK {
		t.Fatalf("pools: %d %s", status, b)
	}
	var page gateway.PoolsPage
	if err := json.Unmarshal(b, &page); err != nil {
		t.Fatal(err)
	}
	labels := map[string]bool{}
	for _, p := range page.Pools {
		for _, h := range p.Holders {
			if !h.Here || h.Age < 0 || h.Expires <= 0 {
				t.Fatalf("holder %+v: want this gateway's, with an age and an expiry", h)
			}
			labels[h.Label] = true
		}
	}
	if len(page.Pools) != 2 || !labels["req-0"] || !labels["req-1"] || !labels["req-2"] {
		t.Fatalf("pools %+v: want 2 pools holding req-0, req-1 and req-2", page.Pools)
	}

	// alice may still take her third slot; an override of max 2 refuses it
	// at once, and its reset gives it back. Its key is given as a user
	// would type it, and kept as the route builds it.
	set := map[string]any{"route": "api", "key": "x-user=alice", "max": 2, "ttl": "1h"}
	if status, b := adminDo(t, http.MethodPut, g.admin+"/admin/api/overrides", testToken, set); status != http.StatusNoContent {
		t.Fatalf("PUT override: %d %s", status, b)
	}
	if status, _, _ := get(t, g.proxy+"/quick", "X-User", "alice"); status != http.StatusTooManyRequests {
		t.Fatalf("alice under an override of max 2, holding 2: %d, want 429", status)
	}
	if status, _, _ := get(t, g.proxy+"/quick", "X-User", "bob"); status != http.StatusOK {
		t.Fatalf("bob, not overridden: %d, want 200", status)
	}
	s = summaryOf(t, g)
	if len(s.Overrides) != 1 || s.Overrides[0].Key != "header:X-User=alice" || s.Overrides[0].Max == nil || *s.Overrides[0].Max != 2 || s.Overrides[0].TTL <= 0 {
		t.Fatalf("overrides %+v, want alice's max 2 with its time left", s.Overrides)
	}
	if b := limitOf(t, s, "api", false).Busiest[0]; b.Max != 2 || !b.Overridden {
		t.Fatalf("alice's line %+v: want max 2, overridden", b)
	}
	if status, b := adminDo(t, http.MethodDelete, g.admin+"/admin/api/overrides?route=api&key=header:X-User%3Dalice", testToken, nil); status != http.StatusNoContent {
		t.Fatalf("DELETE override: %d %s", status, b)
	}
	if status, _, _ := get(t, g.proxy+"/quick", "X-User", "alice"); status != http.StatusOK {
		t.Fatalf("alice after the reset: %d, want 200 (her third of 3)", status)
	}

	// Bad requests say what is wrong, in the words of the configuration:
	// a key no limit of the route reads would never apply.
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"route": "nope", "key": "header:X-User=a", "max": 1}, `no route \"nope\"`},
		{map[string]any{"route": "api", "key": "header:X-User=a", "max": -5}, "between 0"},
		{map[string]any{"route": "api", "key": "header:X-User=a", "max": 99999999}, "between 0"},
		{map[string]any{"route": "api", "key": "header:X-User=a", "share": 100000}, "between 1"},
		{map[string]any{"route": "api", "key": "header:X-User=a"}, "give a max or a share"},
		{map[string]any{"route": "api", "key": "k", "max": 1}, "header:X-User=alice"},
		{map[string]any{"route": "api", "key": "header:X-Tenant=acme", "max": 1}, "no limit of the route reads header:X-Tenant"},
		{map[string]any{"route": "api", "key": "ip:203.0.113.7", "max": 1}, "no limit of the route is keyed by the client's address"},
		{map[string]any{"route": "api", "app": "x", "key": "k", "max": 1}, "either a route or a Pusher app"},
		{map[string]any{"route": "api", "key": "header:X-User=a", "max": 1, "ttl": "soon"}, "invalid ttl"},
		{map[string]any{"route": "api", "key": "header:X-User=a", "max": 1, "extra": true}, "unknown field"},
	} {
		status, b := adminDo(t, http.MethodPut, g.admin+"/admin/api/overrides", testToken, c.body)
		if status != http.StatusBadRequest || !bytes.Contains(b, []byte(`"error"`)) || !bytes.Contains(b, []byte(c.want)) || bytes.Contains(b, []byte("KeepMax")) {
			t.Fatalf("PUT %v: %d %s, want 400 with an error saying %q", c.body, status, b, c.want)
		}
	}
	up.release.Open()
	for _, c := range held {
		if status := testkit.Recv(t, c, 10*time.Second, "a held request"); status != http.StatusOK {
			t.Fatalf("held request: %d", status)
		}
	}
	// A slot is released once the gateway's handler returns, which may be
	// just after the client has its response.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := summaryOf(t, g)
		if limitOf(t, s, "api", false).InUse == 0 && limitOf(t, s, "api", true).InUse == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after the requests: %+v, want nothing in use", s.Limits)
		}
	}
}

// TestAdminConfigProblems: a short token and a tiny refresh fail at start-up
// with their line.
func TestAdminConfigProblems(t *testing.T) {
	_, err := gateway.ParseConfig("k.yaml", []byte("upstream: http://127.0.0.1:1\nadmin_api:\n  token: short\n  overrides_refresh: 1ms\n  show_keys: true\n  history_keys: 1000000\n"))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"line 3", "admin_api.token", "too short", "line 4", "admin_api.overrides_refresh",
		"line 5", "admin_api.show_keys: removed", "hash_keys: true", "line 6", "admin_api.history_keys: 1000000: from 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q lacks %q", err, want)
		}
	}
	t.Setenv("KEYCAP_ADMIN_TOKEN", testToken)
	cfg, err := gateway.ParseConfig("k.yaml", []byte("upstream: http://127.0.0.1:1\n"))
	if err != nil || cfg.AdminAPI.Token != testToken {
		t.Fatalf("token from the environment: %q, %v", cfg.AdminAPI.Token, err)
	}
}

// TestAdminConnectionsAndTheCommandLine: the summary counts a Pusher app's
// connections per user across the store, and keycap override and keycap
// inspect drive the admin API: an override of a user's connection cap
// refuses their next connection.
func TestAdminConnectionsAndTheCommandLine(t *testing.T) {
	t.Parallel()
	pusher := httptest.NewServer(pusherserver.New(nil, testApp))
	defer pusher.Close()
	g := startGateway(t, fmt.Sprintf(`upstream: %s
admin_api: {token: %s}
routes: [{name: api, path: /api/, limits: [{max: 2, key: "header:X-User"}]}]
pusher:
  upstream: %s
  default_cap: 3
  apps: [{id: "1", key: app-key, secret: app-secret}]
`, pusher.URL, testToken, pusher.URL))
	ws := "ws" + strings.TrimPrefix(g.proxy, "http") + "/app/app-key"
	for _, user := range []string{"alice", "alice", "bob"} {
		c, _, err := dialPusher(t, ws, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ev := c.joinPresence(t, user); ev.Event != "pusher_internal:subscription_succeeded" {
			t.Fatalf("%s joins: %+v", user, ev)
		}
	}
	var app gateway.AppSummary
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := summaryOf(t, g)
		if len(s.Apps) != 1 {
			t.Fatalf("apps %+v, want the one app", s.Apps)
		}
		if app = s.Apps[0]; app.Connections == 3 || time.Now().After(deadline) {
			break
		}
	}
	if app.App != "1" || app.Cap != 3 || app.Users != 2 || app.Connections != 3 || app.Busiest[0].Key != "alice" || app.Busiest[0].Held != 2 {
		t.Fatalf("app %+v, want 3 connections of 2 users, alice holding 2 of 3", app)
	}

	admin := []string{"-admin", g.admin, "-token", testToken}
	out, err := runBinary(t, append([]string{"override", "set", "-app", "1", "-key", "alice", "-max", "2", "-ttl", "1h"}, admin...)...)
	if err != nil || !strings.Contains(out, "override set") {
		t.Fatalf("keycap override set: %v\n%s", err, out)
	}
	c, _, err := dialPusher(t, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev := c.joinPresence(t, "alice"); ev.Event == "pusher_internal:subscription_succeeded" {
		t.Fatalf("alice's third connection joined under an override of 2: %+v", ev)
	}
	out, err = runBinary(t, append([]string{"override", "list"}, admin...)...)
	if err != nil || !strings.Contains(out, `conn    1     "alice"  2`) {
		t.Fatalf("keycap override list: %v\n%s", err, out)
	}
	out, err = runBinary(t, append([]string{"inspect"}, admin...)...)
	if err != nil || !strings.Contains(out, "api") || !regexp.MustCompile(`(?m)^1\s+3\s+2\s+3$`).MatchString(out) {
		t.Fatalf("keycap inspect: %v\n%s", err, out)
	}
	out, err = runBinary(t, append([]string{"override", "reset", "-app", "1", "-key", "alice"}, admin...)...)
	if err != nil || !strings.Contains(out, "reset") {
		t.Fatalf("keycap override reset: %v\n%s", err, out)
	}
	if out, err := runBinary(t, "override", "list", "-admin", g.admin, "-token", "wrong-token-000000"); err == nil || !strings.Contains(out, "bearer token") {
		t.Fatalf("a wrong token: %v\n%s", err, out)
	}
}

// TestAdminHashesKeysWhenAsked: with hash_keys, no key appears in clear in
// any answer of the admin API or on its pages, overrides and history
// included; a key's page and the page's forms still work by the hash.
func TestAdminHashesKeysWhenAsked(t *testing.T) {
	t.Parallel()
	up := newHeldUpstream(t)
	g := startGateway(t, strings.Replace(adminConfig(up.URL, ""), "overrides_refresh: 50ms", "overrides_refresh: 50ms, hash_keys: true", 1))
	held := up.hold(t, g.proxy, "alice-secret-user", "hidden-1")
	set := map[string]any{"route": "api", "key": "header:X-User=alice-secret-user", "max": 2}
	if status, b := adminDo(t, http.MethodPut, g.admin+"/admin/api/overrides", testToken, set); status != http.StatusNoContent {
		t.Fatalf("PUT override: %d %s", status, b)
	}
	s := summaryOf(t, g)
	api := limitOf(t, s, "api", false)
	if api.InUse != 1 || len(api.Busiest) != 1 || !strings.HasPrefix(api.Busiest[0].Key, "#") {
		t.Fatalf("api %+v: want one key, shown by its hash", api)
	}
	hash := api.Busiest[0].Key
	for _, path := range []string{"/admin/api/summary", "/admin/api/pools?route=api", "/admin/api/overrides", "/admin/",
		"/admin/api/history", "/admin/key?route=api&key=" + url.QueryEscape(hash), "/admin/api/key?route=api&key=" + url.QueryEscape(hash)} {
		status, b := adminDo(t, http.MethodGet, g.admin+path, testToken, nil)
		if status != http.StatusOK || bytes.Contains(b, []byte("alice-secret-user")) {
			t.Fatalf("%s: %d, key in clear: %v", path, status, bytes.Contains(b, []byte("alice-secret-user")))
		}
	}
	// A hash no key of the route has: refused, naming nothing in clear.
	status, b := adminDo(t, http.MethodGet, g.admin+"/admin/api/key?route=api&key=%23"+strings.Repeat("ab", 16), testToken, nil)
	if status != http.StatusBadRequest || bytes.Contains(b, []byte("alice")) || !bytes.Contains(b, []byte("has this hash")) {
		t.Fatalf("an unknown hash: %d %s", status, b)
	}
	// Keys this gateway refused, ordered by their hashes, never by the
	// keys in clear.
	for _, u := range []string{"zed-secret", "amy-secret", "mia-secret"} {
		for range 2 { // the shadow limit (max 1) and then the real one (max 3) would refuse the third
			_ = up.hold(t, g.proxy, u, u+"-"+fmt.Sprint(time.Now().UnixNano()))
		}
	}
	_, b = adminDo(t, http.MethodGet, g.admin+"/admin/api/history?sort=key&n=1000", testToken, nil)
	var h gateway.History
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	for _, l := range h.Limits {
		var keys []string
		for _, k := range l.Keys {
			keys = append(keys, k.Key)
		}
		if !slices.IsSorted(keys) || bytes.Contains(b, []byte("-secret")) {
			t.Fatalf("history sorted by key under hash_keys: %v (a key in clear: %v)", keys, bytes.Contains(b, []byte("-secret")))
		}
	}
	up.release.Open()
	testkit.Recv(t, held, 10*time.Second, "the held request")
}
