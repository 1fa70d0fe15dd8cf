package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keycap/keycap/internal/testkit"
)

// TestAdaptiveParentFollowsUpstreamOverload: an upstream that answers 503
// to everything is an overloaded backend: the adaptive parent's total goes
// down to its floor, and the metrics, the admin API and page, and keycap
// inspect say so.
func TestAdaptiveParentFollowsUpstreamOverload(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer up.Close()
	g := startGateway(t, fmt.Sprintf(`upstream: %s
store: {type: memory}
admin_api: {token: %s}
parents:
  - {name: db, max: 10, adaptive: {floor: 2, ceiling: 40, interval: 20ms}}
routes:
  - name: api
    path: /
    limits:
      - {max: 40, key: "header:X-Tenant", parent: db}
`, up.URL, testToken))
	client := &http.Client{Timeout: 10 * time.Second}
	want := `keycap_parent_total{parent="gateway:db",shadow="false"} 2`
	hit := func() { // one request, answered 503 by the upstream
		req, _ := http.NewRequest(http.MethodGet, g.proxy+"/x", nil)
		req.Header.Set("X-Tenant", "t1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want the upstream's 503", resp.StatusCode)
		}
	}
	testkit.WaitUntil(t, 30*time.Second, "the total to reach its floor", func() bool {
		hit()
		_, _, body := get(t, g.admin+"/metrics")
		return strings.Contains(body, want)
	})
	_, _, body := get(t, g.admin+"/metrics")
	if !strings.Contains(body, `keycap_parent_total_changes_total{parent="gateway:db",reason="overload",shadow="false"}`) {
		t.Fatalf("no overload changes in the metrics:\n%s", body)
	}

	// The admin API, then keycap inspect, then the page.
	// Requests go on while it waits: an interval with none reads "no samples".
	testkit.WaitUntil(t, 10*time.Second, "the summary to show the floor", func() bool {
		hit()
		s := summaryOf(t, g)
		return len(s.Totals) == 1 && s.Totals[0].Parent == "db" && s.Totals[0].Total == 2 && s.Totals[0].Reason == "overload"
	})
	out, err := runBinary(t, "inspect", "-admin", g.admin, "-token", testToken)
	if err != nil || !strings.Contains(out, "ADAPTIVE TOTAL") || !strings.Contains(out, "\ndb ") {
		t.Fatalf("keycap inspect: %v\n%s", err, out)
	}
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(g.admin+"/admin/"), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), testToken), chromedp.Submit(chromedp.CSS(`input[name=token]`)),
		chromedp.WaitVisible(chromedp.CSS(`table[data-table="totals"]`))); err != nil {
		t.Fatalf("the page: %v", err)
	}
	total, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`tr[data-total="db"] [data-field="total"]`)))
	if err != nil || strings.TrimSpace(total) != "2" {
		t.Fatalf("the page's total: %q, %v; want 2", total, err)
	}
}
