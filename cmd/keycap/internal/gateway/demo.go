package gateway

import (
	"fmt"
	"net/http"
	"time"

	"github.com/keycap/keycap/internal/pusherserver"
)

// DemoApp is the Pusher app the demo upstream serves.
var DemoApp = pusherserver.App{ID: "1", Key: "app-key", Secret: "app-secret"}

// Demo returns the demo upstream: a tiny application to put the gateway in
// front of.
//
//	GET /report   takes a second, like an expensive report
//	GET /report/full  takes three seconds
//	GET /events   server-sent events: five ticks, one a second
//	/app/{key}    a Pusher-protocol WebSocket server (app key "app-key")
//	GET /         says what it is
func Demo() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /report", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Second):
			fmt.Fprintf(w, "report for %s\n", r.Header.Get("X-User"))
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("GET /report/full", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
			fmt.Fprintf(w, "full report for %s\n", r.Header.Get("X-Tenant"))
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range 5 {
			fmt.Fprintf(w, "data: tick %d\n\n", i+1)
			_ = rc.Flush()
			select {
			case <-time.After(time.Second):
			case <-r.Context().Done():
				return
			}
		}
	})
	mux.Handle("/app/", pusherserver.New(nil, DemoApp))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "keycap demo upstream: GET /report (1 s), GET /report/full (3 s), GET /events (SSE), /app/app-key (Pusher)")
	})
	return mux
}
