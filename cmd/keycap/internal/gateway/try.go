package gateway

import (
	"cmp"
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
// X-User), each with header too, and writes what each got, and a hint when
// no request got through for a reason the caller can fix.
func Try(w io.Writer, url string, greedy int, header http.Header) error {
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
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			mu.Lock()
			firstErr = cmp.Or(firstErr, err)
			mu.Unlock()
			return
		}
		for name, values := range header {
			req.Header[name] = values
		}
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
	served, refused, other := map[string]int{}, map[string]int{}, map[string]int{}
	statuses := map[int]int{}
	for _, r := range results {
		statuses[r.status]++
		switch r.status {
		case http.StatusOK:
			served[r.user]++
		case http.StatusTooManyRequests:
			refused[r.user]++
		default:
			other[r.user]++
		}
	}
	fmt.Fprintf(w, "\n%-6s %6s %7s %5s\n", "user", "served", "refused", "other")
	for _, u := range []string{"alice", "bob", "carol"} {
		fmt.Fprintf(w, "%-6s %6d %7d %5d\n", u, served[u], refused[u], other[u])
	}
	switch {
	case statuses[http.StatusUnauthorized] == len(results):
		fmt.Fprintf(w, "\nEvery request was answered 401 Unauthorized: the route wants its key from a token or a header\n"+
			"these requests lack (on_missing: refuse). Give it: keycap try -token TOKEN (a JWT the gateway's jwt\n"+
			"section verifies), or -header 'NAME: VALUE'.\n")
	case statuses[http.StatusNotFound] == len(results):
		fmt.Fprintf(w, "\nEvery request was answered 404 Not Found: no route of the gateway serves %s; give a route's\nURL with -url.\n", url)
	case len(other) > 0 && len(served) == 0 && len(refused) == 0:
		fmt.Fprintf(w, "\nNo request was served or refused by a limit: the statuses were %v (status: requests).\n", statuses)
	}
	return nil
}
