package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
)

func Example() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	limits, _ := httplimit.New(limiter)

	// At most 2 exports in flight per client; the third is refused at once.
	_ = limits.For("exports", func(r *http.Request) httplimit.Rule {
		return httplimit.Max(2)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /exports", limits.Must("exports")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "export started")
	})))

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/exports", nil))
	fmt.Print(w.Code, " ", w.Body)
	// Output: 200 export started
}

func ExampleLimiters_For_plans() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	limits, _ := httplimit.New(limiter)

	_ = limits.For("ai", func(r *http.Request) httplimit.Rule {
		switch r.Header.Get("X-Plan") { // your own lookup of the caller's plan
		case "staff":
			return nil // no limit
		case "pro":
			return httplimit.Limit(keycap.Spec{Max: 8, Wait: 2 * time.Second})
		}
		// Free plans: 1 per user, and 20 across every free user.
		return httplimit.All(
			httplimit.Max(1),
			httplimit.Max(20).By("plan:free").RetryAfter(10*time.Second),
		)
	})
	fmt.Println("registered")
	// Output: registered
}

// Testing an application's limits needs nothing fake: the real middleware
// runs in the test on memstore. To test the refusal path, register the
// limiter again with Max(0), which refuses every request at once; to check
// that a route is limited, record the Limiter's events.
func ExampleLimiters_testing() {
	rec := &keycaptest.Recorder{}
	limiter, _ := keycap.NewLimiter(memstore.New(), keycap.WithObserver(rec))
	defer limiter.Close()
	limits, _ := httplimit.New(limiter)
	_ = limits.For("exports", func(*http.Request) httplimit.Rule { return httplimit.Max(2) })
	route := limits.Must("exports")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	// 1. The route is limited by "exports".
	route.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/exports", nil))
	fmt.Println("limited by exports:", rec.Count(keycap.SlotAcquired, "exports") == 1)

	// 2. Force the 429 path.
	_ = limits.For("exports", func(*http.Request) httplimit.Rule { return httplimit.Max(0) })
	w := httptest.NewRecorder()
	route.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/exports", nil))
	fmt.Println(w.Code, w.Header().Get("Retry-After"))
	// Output:
	// limited by exports: true
	// 429 1
}

// A total shared fairly: at most 50 exports at once across every tenant, at
// most 10 per tenant; a tenant on the enterprise plan counts as three when
// the total is contended, and a full-table export costs 3 slots.
func ExampleLimit_parent() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	limits, _ := httplimit.New(limiter)
	exports := keycap.MustParent("exports", 50)

	_ = limits.For("exports", func(r *http.Request) httplimit.Rule {
		spec := keycap.Spec{Max: 10, Parent: exports, Wait: 5 * time.Second}
		if r.Header.Get("X-Plan") == "enterprise" { // your own lookup
			spec.Share = 3
		}
		if r.URL.Query().Get("full") == "1" {
			spec.Weight = 3
		}
		return httplimit.Limit(spec).By("tenant:" + r.Header.Get("X-Tenant"))
	})
	route := limits.Must("exports")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "export started")
	}))
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/exports?full=1", nil)
	r.Header.Set("X-Tenant", "acme")
	route.ServeHTTP(w, r)
	fmt.Print(w.Code, " ", w.Body)
	// Output: 200 export started
}
