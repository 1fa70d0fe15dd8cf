package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Check builds cfg as the gateway would serve it — stores, routes, keys,
// Pusher apps — without listening, and reports the first error.
func Check(cfg *Config) error {
	g, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	g.Close()
	return nil
}

// Try sends, at once, greedy requests as user alice and three requests one
// after the other as each of bob and carol to url (a route capped per
// X-User), and writes what each got.
func Try(w io.Writer, url string, greedy int) error {
	start := time.Now()
	type result struct {
		user   string
		n      int
		status int
		retry  string
		at     time.Duration
	}
	var mu sync.Mutex
	var results []result
	var firstErr error
	get := func(user string, n int) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(req)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r := result{user, n, resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(start)}
		results = append(results, r)
		line := fmt.Sprintf("[%5dms] %-5s #%d: %d %s", r.at.Milliseconds(), user, n, r.status, http.StatusText(r.status))
		if r.retry != "" {
			line += " (Retry-After: " + r.retry + ")"
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "alice sends %d requests at once; bob and carol send 3 each, one after the other\n\n", greedy)
	var wg sync.WaitGroup
	for i := range greedy {
		wg.Go(func() { get("alice", i+1) })
	}
	for _, u := range []string{"bob", "carol"} {
		wg.Go(func() {
			for i := range 3 {
				get(u, i+1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("is the gateway running at %s? %w", url, firstErr)
	}
	served, refused := map[string]int{}, map[string]int{}
	for _, r := range results {
		switch r.status {
		case http.StatusOK:
			served[r.user]++
		case http.StatusTooManyRequests:
			refused[r.user]++
		}
	}
	fmt.Fprintf(w, "\n%-6s %6s %7s\n", "user", "served", "refused")
	for _, u := range []string{"alice", "bob", "carol"} {
		fmt.Fprintf(w, "%-6s %6d %7d\n", u, served[u], refused[u])
	}
	return nil
}
