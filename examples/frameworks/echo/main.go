// Command echo caps requests in flight per user on an echo server, through
// echo's standard wrapper for net/http middleware, echo.WrapMiddleware.
//
//	cd examples/frameworks && go run ./echo
//	curl -H 'X-User: alice' localhost:8083/reports/42   (-addr to listen elsewhere)
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/memstore"
)

func newServer(limits *httplimit.Limiters) *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	g := e.Group("/reports", echo.WrapMiddleware(limits.Must("reports")))
	g.GET("/:id", func(c echo.Context) error {
		time.Sleep(200 * time.Millisecond) // building the report
		return c.String(http.StatusOK, "report "+c.Param("id")+"\n")
	})
	return e
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
	addr := flag.String("addr", "127.0.0.1:8083", "listen address")
	flag.Parse()
	log.Fatal(newServer(newLimits()).Start(*addr))
}
