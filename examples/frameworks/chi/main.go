// Command chi caps requests in flight per user on a chi router: httplimit's
// middleware is a func(http.Handler) http.Handler, which chi takes as is.
//
//	cd examples/frameworks && go run ./chi
//	curl -H 'X-User: alice' localhost:8081/reports/42   (-addr to listen elsewhere)
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/memstore"
)

func newRouter(limits *httplimit.Limiters) http.Handler {
	r := chi.NewRouter()
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "not limited") })
	// A group whose routes share the "reports" pools.
	r.Group(func(r chi.Router) {
		r.Use(limits.Must("reports"))
		r.Get("/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(200 * time.Millisecond) // building the report
			fmt.Fprintf(w, "report %s\n", chi.URLParam(r, "id"))
		})
	})
	// One route, limited inline.
	exports, err := limits.Inline(1, "exports")
	if err != nil {
		log.Fatal(err)
	}
	r.With(exports).Post("/exports", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "export queued") })
	return r
}

func newLimits() *httplimit.Limiters {
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		log.Fatal(err)
	}
	limits, err := httplimit.New(limiter, httplimit.WithIdentify(func(r *http.Request) (httplimit.Identity, bool) {
		u := r.Header.Get("X-User") // a demo: use your authentication here
		return httplimit.Identity{Kind: "user", ID: u}, u != ""
	}))
	if err != nil {
		log.Fatal(err)
	}
	if err := limits.For("reports", func(*http.Request) httplimit.Rule { return httplimit.Max(2) }); err != nil {
		log.Fatal(err)
	}
	return limits
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen address")
	flag.Parse()
	log.Printf("listening on http://%s", *addr)
	log.Fatal(http.ListenAndServe(*addr, newRouter(newLimits())))
}
