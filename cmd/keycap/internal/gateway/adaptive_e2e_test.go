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
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

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

// TestAdaptiveParentReadsGRPCStatus: a gRPC upstream's RESOURCE_EXHAUSTED
// or UNAVAILABLE is an overload for the route's adaptive parent, whether it
// comes alone (a trailers-only answer) or in the trailers after messages;
// NOT_FOUND is not: the work counts as done and the total holds. The total
// moves on overloads only (overloads_only), so that the latency of calls
// that take microseconds does not move it.
func TestAdaptiveParentReadsGRPCStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		code     codes.Code
		messages int
		overload bool
	}{
		{"trailers-only UNAVAILABLE", codes.Unavailable, 0, true},
		{"RESOURCE_EXHAUSTED after messages", codes.ResourceExhausted, 2, true},
		{"NOT_FOUND after messages", codes.NotFound, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newGRPCUpstream(t)
			g := grpcGateway(t, up, `{max: 40, key: "header:X-Tenant", parent: db}`,
				"store: {type: memory}\nadmin_api: {token: "+testToken+"}\n",
				"parents:\n  - {name: db, max: 10, adaptive: {floor: 2, ceiling: 40, interval: 20ms, overloads_only: true}}\n")
			c := grpcClient(t, g)
			call := func() { // one call, answered tc.code after tc.messages messages
				req := &testgrpc.StreamingOutputCallRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(tc.code), Message: "busy"}}
				for range tc.messages {
					req.ResponseParameters = append(req.ResponseParameters, &testgrpc.ResponseParameters{Size: 10})
				}
				s, err := c.StreamingOutputCall(tenantCtx(t, "t1"), req)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for {
					if _, err := s.Recv(); err != nil {
						if status.Code(err) != tc.code {
							t.Fatalf("the call ended with %v, want the upstream's %v", err, tc.code)
						}
						break
					}
					n++
				}
				if n != tc.messages {
					t.Fatalf("%d messages, want %d", n, tc.messages)
				}
			}
			if tc.overload {
				testkit.WaitUntil(t, 30*time.Second, "the total to reach its floor", func() bool {
					call()
					s := summaryOf(t, g)
					return len(s.Totals) == 1 && s.Totals[0].Total == 2 && s.Totals[0].Reason == "overload"
				})
				return
			}
			// Work that is not an overload: intervals with calls done, none
			// an overload, and the total where it started.
			seen := 0
			testkit.WaitUntil(t, 30*time.Second, "five intervals that saw calls end", func() bool {
				call()
				s := summaryOf(t, g)
				if len(s.Totals) != 1 {
					t.Fatalf("totals: %+v", s.Totals)
				}
				tot := s.Totals[0]
				if tot.Overloads != 0 || tot.Total != 10 {
					t.Fatalf("NOT_FOUND read as an overload: %+v", tot)
				}
				if tot.Completed > 0 {
					seen++
				}
				return seen >= 5
			})
		})
	}
}
