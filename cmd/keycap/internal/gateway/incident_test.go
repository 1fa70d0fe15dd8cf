package gateway_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
)

// incidentConfig: a route with two limits (per user, per address) that the
// page must show apart.
func incidentConfig(upstream string) string {
	return fmt.Sprintf(`upstream: %s
admin_api: {token: %s, overrides_refresh: 50ms}
routes:
  - name: api
    path: /
    limits:
      - {max: 1, key: "header:X-User"}
      - {max: 20, key: ip}
`, upstream, testToken)
}

// get sends one request as user and returns its status.
func getAs(t *testing.T, url, user string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-User", user)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestIncidentPageInABrowser walks the page as an on-call engineer does, in
// headless Chromium: signs in with the token, finds the route's refusals,
// the two limits of the route apart (per user at its cap, per address
// not), the key refused most in clear with its count, a chart per limit;
// filters the keys; opens the key to see its holder and the request
// holding it; sets an override from the key's page and resets it from the
// overrides table; and each change is in the log with the key.
func TestIncidentPageInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	up := newHeldUpstream(t)
	g := startGateway(t, incidentConfig(up.URL))
	held := []<-chan int{up.hold(t, g.proxy, "alice", "req-alice"), up.hold(t, g.proxy, "bob", "req-bob")}
	for range 3 {
		if status := getAs(t, g.proxy+"/", "alice"); status != http.StatusTooManyRequests {
			t.Fatalf("alice's request over her cap: %d, want 429", status)
		}
	}
	if status := getAs(t, g.proxy+"/", "bob"); status != http.StatusTooManyRequests {
		t.Fatalf("bob's request over his cap: %d, want 429", status)
	}

	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
		if err != nil {
			t.Fatalf("counting %s: %v", sel, err)
		}
		return n
	}
	do("sign in", chromedp.Navigate(g.admin+"/admin/"), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), testToken), chromedp.Submit(chromedp.CSS(`input[name=token]`)),
		chromedp.WaitVisible(chromedp.CSS(`table[data-table="limits"]`)))

	user := `tr[data-pool="api"][data-source="header:X-User"] `
	ip := `tr[data-pool="api"][data-source="ip"] `
	keys := `div[data-history="api header:X-User"] `
	got := fmt.Sprintf("route: %s requests, %s refused; per user: %s in use, %s keys, %s at cap, max %s; per ip: %s in use, %s keys, %s at cap, max %s; top key %s refused %s; %s refused in all",
		text(`tr[data-route="api"] [data-field="requests"]`), text(`tr[data-route="api"] [data-field="refused"]`),
		text(user+`[data-field="in_use"]`), text(user+`[data-field="keys"]`), text(user+`[data-field="at_cap"]`), text(user+`[data-field="max"]`),
		text(ip+`[data-field="in_use"]`), text(ip+`[data-field="keys"]`), text(ip+`[data-field="at_cap"]`), text(ip+`[data-field="max"]`),
		text(keys+`tr[data-key] .key`), text(keys+`tr[data-key] [data-field="refused"]`),
		text(keys+`[data-field="refused_total"]`))
	want := "route: 4 requests, 4 refused; per user: 2 in use, 2 keys, 2 at cap, max 1; per ip: 2 in use, 1 keys, 0 at cap, max 20; top key header:X-User=alice refused 3; 4 refused in all"
	if got != want {
		t.Fatalf("the page shows\n%s\nwant\n%s", got, want)
	}
	charts := count(`svg.chart`)
	if charts < 3 { // the route's and one per limit
		t.Fatalf("%d charts, want one for the route and one per limit", charts)
	}
	screenshot(t, ctx, "KEYCAP_SCREENSHOT")

	do("filter the keys", chromedp.Navigate(g.admin+"/admin/?q=bob&refresh=0"), chromedp.WaitVisible(chromedp.CSS(`table[data-table="keys"]`)))
	if got := text(keys + `tr[data-key] .key`); got != "header:X-User=bob" {
		t.Fatalf("filtered on bob, the first key is %q", got)
	}
	rows := count(`div[data-history="api header:X-User"] tr[data-key]`)
	if rows != 1 {
		t.Fatalf("filtered on bob, %d keys shown, want 1", rows)
	}

	do("open alice's page", chromedp.Navigate(g.admin+"/admin/key?"+url.Values{"route": {"api"}, "key": {"X-User=alice"}}.Encode()),
		chromedp.WaitVisible(chromedp.CSS(`table[data-table="holders"]`)))
	if got := fmt.Sprintf("%s %s/%s label %s", text(`[data-field="key"]`), text(`[data-field="held"]`), text(`[data-field="max"]`), text(`[data-field="label"]`)); got != "header:X-User=alice 1/1 label req-alice" {
		t.Fatalf("alice's page: %q", got)
	}
	do("set an override", chromedp.SendKeys(chromedp.CSS(`form[data-form="set"] input[name=max]`), "5"),
		chromedp.SendKeys(chromedp.CSS(`form[data-form="set"] input[name=ttl]`), "1h"),
		chromedp.Submit(chromedp.CSS(`form[data-form="set"] input[name=max]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-field="done"]`)))
	if got := text(`[data-field="done"]`) + " " + text(`[data-field="max"]`); got != "override set 5" {
		t.Fatalf("after setting max 5: %q", got)
	}
	logged := g.waitLog(t, "keycap: override set")
	if logged["key"] != "header:X-User=alice" || logged["by"] != "page" || logged["max"] != float64(5) {
		t.Fatalf("the log of the override: %v", logged)
	}
	if status := getAs(t, g.proxy+"/", "alice"); status != http.StatusOK {
		t.Fatalf("alice under her override of 5: %d, want 200", status)
	}

	do("reset it from the page", chromedp.Navigate(g.admin+"/admin/?refresh=0"),
		chromedp.Submit(chromedp.CSS(`tr[data-override="api header:X-User=alice"] form[data-form="reset"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-field="done"]`)))
	if got := text(`[data-field="done"]`); !strings.HasPrefix(got, "override reset") {
		t.Fatalf("after reset: %q", got)
	}
	if logged := g.waitLog(t, "keycap: override reset"); logged["key"] != "header:X-User=alice" || logged["by"] != "page" {
		t.Fatalf("the log of the reset: %v", logged)
	}
	up.release.Open()
	for _, c := range held {
		testkit.Recv(t, c, 10*time.Second, "a held request")
	}
}

// TestPageFormsRefuseOtherSites: a form posted without the page's token, or
// from another site, changes nothing.
func TestPageFormsRefuseOtherSites(t *testing.T) {
	t.Parallel()
	up := newHeldUpstream(t)
	g := startGateway(t, incidentConfig(up.URL))
	var location string
	post := func(form url.Values, header map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, g.admin+"/admin/override", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+testToken)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		location = resp.Header.Get("Location")
		return resp.StatusCode
	}
	set := url.Values{"action": {"set"}, "route": {"api"}, "key": {"header:X-User=mallory"}, "max": {"1000"}}
	if status := post(set, nil); status != http.StatusForbidden {
		t.Fatalf("without the form's token: %d, want 403", status)
	}
	status, body := adminDo(t, http.MethodGet, g.admin+"/admin/key?route=api&key=X-User%3Dmallory", testToken, nil)
	if status != http.StatusOK || !strings.Contains(string(body), `name="csrf" value="`) {
		t.Fatalf("GET mallory's page: %d\n%s", status, body)
	}
	csrf := strings.SplitN(strings.SplitN(string(body), `name="csrf" value="`, 2)[1], `"`, 2)[0]
	set.Set("csrf", csrf)
	if status := post(set, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}); status != http.StatusForbidden {
		t.Fatalf("from another site: %d, want 403", status)
	}
	if status, b := adminDo(t, http.MethodGet, g.admin+"/admin/api/overrides", testToken, nil); status != 200 || strings.Contains(string(b), "mallory") {
		t.Fatalf("overrides after the refused forms: %d %s", status, b)
	}
	set.Set("back", "/admin/key?route=api&key=header%3AX-User%3Dmallory&done=an+earlier+message")
	if status := post(set, nil); status != http.StatusSeeOther {
		t.Fatalf("the page's own form: %d, want 303", status)
	}
	if want := "/admin/key?done=override+set&key=header%3AX-User%3Dmallory&route=api"; location != want {
		t.Fatalf("back to %q, want %q (one message, the new one)", location, want)
	}
	for _, back := range []string{"https://evil.example/admin/", "//evil.example/admin/", "/elsewhere"} {
		set.Set("back", back)
		if status := post(set, nil); status != http.StatusSeeOther || location != "/admin/?done=override+set" {
			t.Fatalf("back %q: %d to %q, want 303 to the page", back, status, location)
		}
	}
	if status, b := adminDo(t, http.MethodGet, g.admin+"/admin/api/overrides", testToken, nil); status != 200 || !strings.Contains(string(b), "mallory") {
		t.Fatalf("overrides after the page's form: %d %s", status, b)
	}
}

// TestInspectAcrossGateways: keycap inspect adds up the histories of every
// gateway given to -admin (two gateways on one Redis, each refusing alice),
// and -key shows the key's holder on the other gateway with its age and
// the gateway's tag, and the request holding it on its own.
func TestInspectAcrossGateways(t *testing.T) {
	t.Parallel()
	up := newHeldUpstream(t)
	config := incidentConfig(up.URL) + fmt.Sprintf("store: {type: redis, url: \"redis://%s\", prefix: \"%s\"}\n",
		testenv.RedisAddr(), testenv.Prefix(t, testenv.Redis(t)))
	a, b := startGateway(t, config), startGateway(t, config)
	held := up.hold(t, a.proxy, "alice", "req-held-on-a")
	for _, g := range []*gw{a, b, b} {
		if status := getAs(t, g.proxy+"/", "alice"); status != http.StatusTooManyRequests {
			t.Fatalf("alice over her cap: %d, want 429", status)
		}
	}
	out, err := runBinary(t, "inspect", "-admin", a.admin+","+b.admin, "-token", testToken, "-route", "api")
	if err != nil {
		t.Fatalf("keycap inspect: %v\n%s", err, out)
	}
	for _, re := range []string{
		`(?m)^api\s+header:X-User\s+1\s+1\s+1\s+0\s+1\s`, // pool, key, max, keys, in use, waiting, at cap
		`(?m)^api\s+3\s+3\s+0\s+0$`,                      // the route's last 15 minutes, both gateways
		`(?m)^api header:X-User: 3 REFUSED IN 15 MIN`,
		`(?m)^header:X-User=alice\s+3\s+\d+s ago\s`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("keycap inspect -admin A,B: no line matching %s in\n%s", re, out)
		}
	}
	out, err = runBinary(t, "inspect", "-admin", b.admin, "-token", testToken, "-route", "api", "-key", "X-User=alice")
	if err != nil || !regexp.MustCompile(`(?m)^api: 1 / 1 held$`).MatchString(out) || !strings.Contains(out, "last 15 min here: 2 refused") {
		t.Fatalf("keycap inspect -key on the other gateway: %v\n%s", err, out)
	}
	out, err = runBinary(t, "inspect", "-admin", a.admin, "-token", testToken, "-route", "api", "-key", "X-User=alice")
	if err != nil || !regexp.MustCompile(`(?m)^\S+\s+1\s+\d+\.\ds\s+\d+\.\ds\s+\S+\s+req-held-on-a$`).MatchString(out) {
		t.Fatalf("keycap inspect -key on the holding gateway: %v\n%s", err, out)
	}
	up.release.Open()
	testkit.Recv(t, held, 10*time.Second, "the held request")
}
