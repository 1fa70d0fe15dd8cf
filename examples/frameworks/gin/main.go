// Command gin caps requests in flight per user on a gin engine. Gin's
// middleware is a gin.HandlerFunc, so httplimit's middleware goes through the
// small adapter Wrap below: the rest of gin's chain runs inside the limited
// handler, so the slot is held until every later handler has returned.
//
//	cd examples/frameworks && go run ./gin
//	curl -H 'X-User: alice' localhost:8082/reports/42   (-addr to listen elsewhere)
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/memstore"
)

// Wrap adapts net/http middleware to gin. When the middleware refuses (it
// writes a 429 or 503 and does not call the handler), the chain is aborted.
func Wrap(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		called := false
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called = true
			c.Request = r
			c.Next()
		})).ServeHTTP(c.Writer, c.Request)
		if !called {
			c.Abort()
		}
	}
}

func newEngine(limits *httplimit.Limiters) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "not limited\n") })
	reports := r.Group("/reports", Wrap(limits.Must("reports")))
	reports.GET("/:id", func(c *gin.Context) {
		time.Sleep(200 * time.Millisecond) // building the report
		c.String(http.StatusOK, "report %s\n", c.Param("id"))
	})
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
	addr := flag.String("addr", "127.0.0.1:8082", "listen address")
	flag.Parse()
	log.Printf("listening on http://%s", *addr)
	log.Fatal(newEngine(newLimits()).Run(*addr))
}
