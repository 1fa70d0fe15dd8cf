package gateway_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testkit"
)

// TestRequestMetrics: the gateway counts each route's requests by status
// class and outcome, times the upstream, and counts refusals by the
// refusing limit's key source, never its key — the two limits of a route
// told apart.
func TestRequestMetrics(t *testing.T) {
	t.Parallel()
	up := newHeldUpstream(t)
	dead := deadURL(t)
	g := startGateway(t, fmt.Sprintf(`upstream: %s
routes:
  - name: api
    path: /
    limits:
      - {max: 1, key: "header:X-User"}
      - {max: 100, key: ip}
  - name: tenants
    path: /t/
    limits: [{max: 5, key: "header:X-Tenant", on_missing: refuse}]
  - name: down
    path: /down/
    upstream: %s
    limits: [{max: 5}]
`, up.URL, dead))
	held := up.hold(t, g.proxy, "alice", "held-1")
	for range 3 { // alice holds her one slot: refused by the per-user limit
		if code, _, _ := get(t, g.proxy+"/quick", "X-User", "alice"); code != http.StatusTooManyRequests {
			t.Fatalf("alice's second request: %d, want 429", code)
		}
	}
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736" // bob's request is in a sampled trace
	if code, _, _ := get(t, g.proxy+"/quick", "X-User", "bob", "Traceparent", "00-"+trace+"-00f067aa0ba902b7-01"); code != http.StatusOK {
		t.Fatalf("bob: %d, want 200", code)
	}
	if code, _, _ := get(t, g.proxy+"/t/x"); code != http.StatusUnauthorized {
		t.Fatalf("no X-Tenant: %d, want 401", code)
	}
	if code, _, _ := get(t, g.proxy+"/down/x"); code != http.StatusBadGateway {
		t.Fatalf("dead upstream: %d, want 502", code)
	}
	up.release.Open()
	if code := testkit.Recv(t, held, 10*time.Second, "alice's held request"); code != http.StatusOK {
		t.Fatalf("alice's held request: %d", code)
	}
	want := []string{
		`keycap_gateway_requests_total{code="4xx",outcome="refused",route="api"} 3`,
		`keycap_gateway_requests_total{code="2xx",outcome="upstream",route="api"} 2`,
		`keycap_gateway_requests_total{code="4xx",outcome="unauthorized",route="tenants"} 1`,
		`keycap_gateway_requests_total{code="5xx",outcome="upstream_error",route="down"} 1`,
		`keycap_gateway_refusals_total{route="api",source="header:X-User"} 3`,
		`keycap_gateway_upstream_seconds_count{route="api"} 2`,
		// The route's two limits, apart.
		`keycap_limit_exceeded_total{family="app",limit="api header:X-User",shadow="false"} 3`,
		`keycap_slots_acquired_total{family="app",limit="api header:X-User",shadow="false"} 2`,
		`keycap_slots_acquired_total{family="app",limit="api ip",shadow="false"} 2`,
	}
	// The held request is counted once its handler returns, which may be
	// just after its client has the response.
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, _, body = get(t, g.admin+"/metrics")
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics has no %s:\n%s", missing, grepLines(body, "keycap_gateway_"))
		}
	}
	if strings.Contains(body, "alice") || strings.Contains(body, `source="ip"`) {
		t.Fatalf("/metrics names a key, or a limit that refused nothing:\n%s", grepLines(body, "keycap_gateway_"))
	}
	// A scraper that asks for OpenMetrics (Prometheus does) gets bob's
	// trace as the exemplar of his latency and of his request's count.
	_, _, om := get(t, g.admin+"/metrics", "Accept", "application/openmetrics-text; version=1.0.0")
	for _, re := range []string{
		`(?m)^keycap_gateway_upstream_seconds_bucket\{route="api",le="[^"]+"\} \d+ # \{trace_id="` + trace + `"\} [0-9.e+-]+ [0-9.e+]+$`,
		`(?m)^keycap_gateway_requests_total\{code="2xx",outcome="upstream",route="api"\} 2(\.0)? # \{trace_id="` + trace + `"\} 1(\.0)? [0-9.e+]+$`,
	} {
		if !regexp.MustCompile(re).MatchString(om) {
			t.Fatalf("OpenMetrics /metrics has no line matching %s:\n%s", re, grepLines(om, "trace_id"))
		}
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
