// Package capcheck is the test the framework examples share: three
// concurrent requests of one user on a route capped at 2 in flight.
package capcheck

import (
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
)

// ThreeAtOnce sends three requests for alice at once and one for bob, and
// checks that alice got two 200s and one 429 with Retry-After, and bob a 200.
func ThreeAtOnce(t *testing.T, h http.Handler, path string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(user string) *http.Response {
		r, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		r.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	// The three requests must overlap inside the handler for the cap to
	// show. On a loaded machine they may not; a cap that is missing fails
	// every attempt.
	var codes []int
	for attempt := 0; attempt < 3; attempt++ {
		var mu sync.Mutex
		codes = codes[:0]
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				resp := get("alice")
				if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "1" {
					t.Errorf("429 without Retry-After: 1")
				}
				mu.Lock()
				codes = append(codes, resp.StatusCode)
				mu.Unlock()
			})
		}
		wg.Wait()
		sort.Ints(codes)
		if codes[2] == http.StatusTooManyRequests {
			break
		}
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("alice got %v, want [200 200 429]", codes)
	}
	if c := get("bob").StatusCode; c != 200 {
		t.Fatalf("bob got %d", c)
	}
}
