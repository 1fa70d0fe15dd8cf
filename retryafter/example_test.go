package retryafter_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/keycap/keycap/retryafter"
)

// Parse says whether a response is throttled and how long to stay away,
// whichever header the vendor used.
func ExampleParse() {
	h := retryafter.Parse(http.StatusTooManyRequests, http.Header{"Retry-After": {"2.542"}}, nil)
	fmt.Println(h.Throttled, h.Wait, h.Source) // decimal seconds are rounded up, never down

	// GitHub's secondary limits are 403s that say so in the body; without a
	// usable header, the wait is the parser's default.
	body := []byte(`{"message": "You have exceeded a secondary rate limit."}`)
	h = retryafter.Parse(http.StatusForbidden, http.Header{}, body)
	fmt.Println(h.Throttled, h.Wait, h.Source)

	// A 200 that says nothing remains is Exhausted: pause before the 429.
	ok := http.Header{}
	ok.Set("RateLimit", `"default";r=0;t=20`)
	h = retryafter.Parse(http.StatusOK, ok, nil)
	fmt.Println(h.Exhausted, h.Wait, h.Source)

	// A 503 without a hint is an ordinary server error.
	h = retryafter.Parse(http.StatusServiceUnavailable, http.Header{}, nil)
	fmt.Println(h.Throttled)
	// Output:
	// true 3s Retry-After
	// true 1m0s default
	// true 20s Ratelimit
	// false
}

// A Parser with its own clock reads dates against it, and caps every wait.
// Discord sends its hint in the body.
func ExampleParser() {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := retryafter.Parser{
		Default: 10 * time.Second, // a 429 without a usable hint
		Max:     time.Hour,        // however long the vendor asks for
		Now:     func() time.Time { return now },
	}

	h := p.Parse(429, http.Header{"Retry-After": {"Mon, 30 Nov 2026 12:01:30 GMT"}}, nil)
	fmt.Println(h.Wait, h.Until.Format(time.TimeOnly))

	h = p.Parse(429, http.Header{}, []byte(`{"message": "You are being rate limited.", "retry_after": 4.2}`))
	fmt.Println(h.Wait, h.Source)

	fmt.Println(p.Parse(429, http.Header{"Retry-After": {"86400"}}, nil).Wait)
	h = p.Parse(429, http.Header{}, nil)
	fmt.Println(h.Wait, h.Source)
	// Output:
	// 1m30s 12:01:30
	// 5s body
	// 1h0m0s
	// 10s default
}

// Reset reads a reset value whatever its form: delta seconds, Unix seconds,
// Unix milliseconds, a Go duration or a date.
func ExampleReset() {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"41", "1796040060", "1796040030000", "6m30s", "2026-11-30T12:05:00Z", "soon"} {
		d, ok := retryafter.Reset(v, now)
		fmt.Println(v, d, ok)
	}
	// Output:
	// 41 41s true
	// 1796040060 1m0s true
	// 1796040030000 30s true
	// 6m30s 6m30s true
	// 2026-11-30T12:05:00Z 5m0s true
	// soon 0s false
}
