package gateway_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
)

// browser starts headless Chromium for t, stopped when t ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := testenv.Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second) // every step below is bounded by it
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// pageFigures loads the admin page and reads the figures a person reads.
func pageFigures(t *testing.T, ctx context.Context, url string, fields map[string]*string) {
	t.Helper()
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("Network.enable: %v", err)
	}
	headers := network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + testToken}}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, headers); err != nil {
		t.Fatalf("Network.setExtraHTTPHeaders: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`table[data-table="limits"]`))); err != nil {
		t.Fatalf("loading %s in the browser: %v", url, err)
	}
	for sel, out := range fields {
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		*out = strings.TrimSpace(text)
	}
}

// TestAdminPageInABrowser: the admin page, rendered by headless Chromium,
// shows the slots in use per route and per key against their caps, the
// shadow candidate's count, and an override; and shows them falling to 0
// once the requests end.
func TestAdminPageInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	up := newHeldUpstream(t)
	g := startGateway(t, adminConfig(up.URL, ""))
	var held []<-chan int
	for i, user := range []string{"alice", "alice", "bob"} {
		held = append(held, up.hold(t, g.proxy, user, fmt.Sprintf("page-%d", i)))
	}
	set := map[string]any{"route": "api", "key": "header:X-User=bob", "max": 1}
	if status, b := adminDo(t, "PUT", g.admin+"/admin/api/overrides", testToken, set); status != 204 {
		t.Fatalf("PUT override: %d %s", status, b)
	}
	row := `tr[data-pool="api"][data-shadow="false"] `
	shadowRow := `tr[data-pool="api"][data-shadow="true"] `
	var inUse, keys, shadowInUse, aliceHeld, aliceMax, bobMax, node, override string
	pageFigures(t, ctx, g.admin+"/admin/", map[string]*string{
		row + `[data-field="in_use"]`:                                      &inUse,
		row + `[data-field="keys"]`:                                        &keys,
		shadowRow + `[data-field="in_use"]`:                                &shadowInUse,
		row + `div[data-key="header:X-User=alice"] [data-field="held"]`:    &aliceHeld,
		row + `div[data-key="header:X-User=alice"] [data-field="key_max"]`: &aliceMax,
		row + `div[data-key="header:X-User=bob"] [data-field="key_max"]`:   &bobMax,
		`[data-field="node"]`:                                              &node,
		`tr[data-override="api header:X-User=bob"] [data-field="max"]`:     &override,
	})
	got := fmt.Sprintf("in use %s, keys %s, shadow %s, alice %s/%s, bob max %s, override %s", inUse, keys, shadowInUse, aliceHeld, aliceMax, bobMax, override)
	if want := "in use 3, keys 2, shadow 2, alice 2/3, bob max 1, override 1"; got != want || node == "" {
		t.Fatalf("the page shows %q (node %q), want %q", got, node, want)
	}
	up.release.Open()
	for _, c := range held {
		testkit.Recv(t, c, 10*time.Second, "a held request")
	}
	// A slot is released once the gateway's handler returns, which may be
	// just after the client has its response: reload as a person would.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		pageFigures(t, ctx, g.admin+"/admin/", map[string]*string{row + `[data-field="in_use"]`: &inUse, shadowRow + `[data-field="in_use"]`: &shadowInUse})
		if inUse == "0" && shadowInUse == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after the requests the page shows %s in use (shadow %s), want 0", inUse, shadowInUse)
		}
	}
}

// screenshot saves the browser's page as PNG where the variable env names,
// for a person to look at (docs/admin-page.png is one).
func screenshot(t *testing.T, ctx context.Context, env string) {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
