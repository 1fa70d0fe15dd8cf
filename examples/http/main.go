// Command http serves a small API whose expensive routes are capped per user
// with httplimit, on net/http's ServeMux.
//
//	go run ./examples/http                       # in-process store
//	go run ./examples/http -redis 127.0.0.1:6379 # shared by every instance
//
// Then, in another terminal:
//
//	curl -i -H 'X-User: alice' localhost:8080/exports          # 200 after 3 s
//	for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code}\n' -H 'X-User: alice' localhost:8080/exports & done; wait
//	                                                             # 200, 200, 429: 2 exports at once per user
//	curl -N -H 'X-User: bob' localhost:8080/events              # a stream that holds its slot while it runs
//
// With -selftest it makes those requests itself, prints what it got, and exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/redisstore"
)

// user is what an authentication middleware would put in the context. Here
// it trusts an X-User header: a demo, not a login.
type userKey struct{}

func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-User"); u != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
		}
		next.ServeHTTP(w, r)
	})
}

func identify(r *http.Request) (httplimit.Identity, bool) {
	u, ok := r.Context().Value(userKey{}).(string)
	return httplimit.Identity{Kind: "user", ID: u}, ok
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address (with -selftest, default a free port)")
	redisAddr := flag.String("redis", "", "Redis address; empty: the in-process store")
	selftest := flag.Bool("selftest", false, "make a few requests against the server, print them, and exit")
	flag.Parse()
	if *selftest && !flagSet("addr") {
		*addr = "127.0.0.1:0" // a self-test must not need port 8080 free
	}

	store := keycap.Store(memstore.New())
	if *redisAddr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		s, err := redisstore.New(rdb, redisstore.WithPrefix("example-http:"))
		if err != nil {
			log.Fatal(err)
		}
		store = s
	}
	limiter, err := keycap.NewLimiter(store, keycap.WithObserver(keycap.NewSlogObserver(slog.Default())))
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	limits, err := httplimit.New(limiter, httplimit.WithIdentify(identify))
	if err != nil {
		log.Fatal(err)
	}
	// 2 exports at once per user (guests: per IP).
	must(limits.For("exports", func(r *http.Request) httplimit.Rule {
		return httplimit.Max(2).RetryAfter(3 * time.Second)
	}))
	// 1 stream per user, and 50 across everyone.
	must(limits.For("streams", func(r *http.Request) httplimit.Rule {
		return httplimit.All(httplimit.Max(1), httplimit.Max(50).By("everyone"))
	}))

	mux := http.NewServeMux()
	mux.Handle("GET /exports", limits.Must("exports")(http.HandlerFunc(export)))
	mux.Handle("GET /events", limits.Must("streams")(http.HandlerFunc(events)))
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "not limited") })

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: authenticate(mux)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}()
	if *selftest {
		run("http://" + ln.Addr().String())
	} else {
		log.Printf("listening on http://%s", ln.Addr())
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		<-ctx.Done()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func export(w http.ResponseWriter, r *http.Request) {
	select {
	case <-time.After(500 * time.Millisecond): // the expensive part
		fmt.Fprintln(w, "export ready")
	case <-r.Context().Done():
	}
}

func events(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range 3 {
		fmt.Fprintf(w, "data: event %d\n\n", i)
		_ = http.NewResponseController(w).Flush()
		select {
		case <-time.After(200 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
}

// run sends three exports at once for alice, then one for bob.
func run(base string) {
	get := func(user, path string) string {
		r, _ := http.NewRequest(http.MethodGet, base+path, nil)
		r.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		s := fmt.Sprintf("%d %q", resp.StatusCode, body)
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			s += " Retry-After: " + ra
		}
		return s
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 3 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			res := get("alice", "/exports")
			mu.Lock()
			fmt.Printf("alice export %d: %s\n", i+1, res)
			mu.Unlock()
		})
	}
	wg.Wait()
	fmt.Printf("bob export:     %s\n", get("bob", "/exports"))
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
