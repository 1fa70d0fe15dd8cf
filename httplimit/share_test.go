package httplimit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/memstore"
)

// TestWeightsAndAParent: requests of weight 3 and 1 share a tenant's slots,
// and the tenants share their parent's total.
func TestWeightsAndAParent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	total := keycap.MustParent("httplimit-test-total", 4)
	e.register(t, "exports", func(r *http.Request) httplimit.Rule {
		spec := keycap.Spec{Max: 4, Parent: total}
		if r.Header.Get("Full") == "1" {
			spec.Weight = 3
		}
		return httplimit.Limit(spec).By("tenant:" + r.Header.Get("Tenant"))
	})
	g := newGate(t)
	h := e.limiters.Must("exports")(g)
	full := holding(t, h, g, req("192.0.2.1:1", "Tenant", "a", "Full", "1"))
	one := holding(t, h, g, req("192.0.2.1:2", "Tenant", "b"))
	for _, r := range []*http.Request{req("192.0.2.1:3", "Tenant", "a"), req("192.0.2.1:4", "Tenant", "c")} {
		if w := do(h, r); w.Code != http.StatusTooManyRequests {
			t.Fatalf("a request past the parent's 3+1 of 4: %d", w.Code)
		}
	}
	g.release.Open()
	wait(t, full)
	wait(t, one)
	if a, r := e.rec.Count(keycap.SlotAcquired, ""), e.rec.Count(keycap.SlotReleased, ""); a != 2 || r != 2 {
		t.Fatalf("acquired %d, released %d; want 2 and 2", a, r)
	}
}

// TestInvalidWeightIsALogged500: a weight above the max is the
// application's bug, named in the log.
func TestInvalidWeightIsALogged500(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memstore.New())
	e.register(t, "exports", func(*http.Request) httplimit.Rule { return httplimit.Limit(keycap.Spec{Max: 2, Weight: 3}) })
	h := e.limiters.Must("exports")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	if w := do(h, req("192.0.2.1:1")); w.Code != http.StatusInternalServerError {
		t.Fatalf("weight 3 of max 2: %d, want 500", w.Code)
	}
	if logs := e.logs.String(); !contains(logs, "Weight") {
		t.Fatalf("the log does not name the weight: %s", logs)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
