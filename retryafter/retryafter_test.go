package retryafter_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap/retryafter"
)

// now is the test's clock: 2026-11-30 12:00:00 UTC.
var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func parser() retryafter.Parser { return retryafter.Parser{Now: func() time.Time { return now }} }

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParse(t *testing.T) {
	t.Parallel()
	const (
		throttled = "throttled"
		exhausted = "exhausted"
		none      = "none"
	)
	cases := []struct {
		name   string
		status int
		h      http.Header
		body   string
		want   string // throttled, exhausted or none
		wait   time.Duration
		source string
	}{
		// Retry-After, RFC 9110 and its deviations.
		{"seconds", 429, header("Retry-After", "30"), "", throttled, 30 * time.Second, "Retry-After"},
		{"zero", 429, header("Retry-After", "0"), "", throttled, 0, "Retry-After"},
		{"decimal 2.0 (Shopify)", 429, header("Retry-After", "2.0"), "", throttled, 2 * time.Second, "Retry-After"},
		{"decimal rounded up (Microsoft Graph)", 429, header("Retry-After", "2.542"), "", throttled, 3 * time.Second, "Retry-After"},
		{"long decimal (Sentry)", 429, header("Retry-After", "292.052427053"), "", throttled, 293 * time.Second, "Retry-After"},
		{"below a second is not now (SpaceTraders)", 429, header("Retry-After", "0.503"), "", throttled, time.Second, "Retry-After"},
		{"spaces", 429, header("Retry-After", "  7 "), "", throttled, 7 * time.Second, "Retry-After"},
		{"IMF-fixdate", 429, header("Retry-After", "Mon, 30 Nov 2026 12:01:30 GMT"), "", throttled, 90 * time.Second, "Retry-After"},
		{"RFC 850 date", 429, header("Retry-After", "Monday, 30-Nov-26 12:02:00 GMT"), "", throttled, 2 * time.Minute, "Retry-After"},
		{"asctime date", 429, header("Retry-After", "Mon Nov 30 12:00:45 2026"), "", throttled, 45 * time.Second, "Retry-After"},
		{"past date means now", 429, header("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"), "", throttled, 0, "Retry-After"},
		{"several lines: the longest", 429, header("Retry-After", "10", "Retry-After", "30", "Retry-After", "soon"), "", throttled, 30 * time.Second, "Retry-After"},
		{"a list of numbers: the longest", 429, header("Retry-After", "120, 60"), "", throttled, 2 * time.Minute, "Retry-After"},
		{"RFC 3339 date", 429, header("Retry-After", "2026-11-30T12:00:20Z"), "", throttled, 20 * time.Second, "Retry-After"},
		{"ISO 8601 to the minute (as Jira)", 429, header("Retry-After", "2026-11-30T12:01Z"), "", throttled, time.Minute, "Retry-After"},
		{"500 with Retry-After is honoured", 500, header("Retry-After", "15"), "", throttled, 15 * time.Second, "Retry-After"},
		{"502 with Retry-After-Ms is honoured", 502, header("Retry-After-Ms", "800"), "", throttled, 800 * time.Millisecond, "Retry-After-Ms"},
		{"500 with only a reset header is an error", 500, header("X-RateLimit-Reset", "30"), "", none, 0, ""},
		{"500 without a hint is an error", 500, header(), "", none, 0, ""},
		{"retry-after-ms (OpenAI SDKs)", 429, header("Retry-After-Ms", "1500.5", "Retry-After", "2"), "", throttled, 1500500 * time.Microsecond, "Retry-After-Ms"},
		{"lower-case header", 429, http.Header{"Retry-After": {"5"}}, "", throttled, 5 * time.Second, "Retry-After"},

		// The IETF RateLimit fields, three generations.
		{"draft -08 list", 429, header("RateLimit", `"default";r=0;t=30`), "", throttled, 30 * time.Second, "Ratelimit"},
		{"draft -08 several policies", 429, header("RateLimit", `"burst";r=5;t=2, "daily";r=0;t=3600`), "", throttled, time.Hour, "Ratelimit"},
		{"draft -08 split lines", 429, header("RateLimit", `"burst";r=0;t=2`, "RateLimit", `"daily";r=0;t=60`), "", throttled, time.Minute, "Ratelimit"},
		{"draft -08 partition key", 429, header("RateLimit", `"default";r=0;t=9;pk=:dHJpYWwxMjEzMjM=:`), "", throttled, 9 * time.Second, "Ratelimit"},
		{"draft -07 dictionary", 429, header("RateLimit", "limit=100, remaining=0, reset=5"), "", throttled, 5 * time.Second, "Ratelimit"},
		{"drafts to -06 RateLimit-Reset", 429, header("RateLimit-Limit", "100", "RateLimit-Remaining", "0", "RateLimit-Reset", "50"), "", throttled, 50 * time.Second, "Ratelimit-Reset"},
		{"Retry-After wins over RateLimit", 429, header("Retry-After", "20", "RateLimit", `"dynamic";r=15;t=40`, "RateLimit-Policy", `"dynamic";q=100;w=60`), "", throttled, 20 * time.Second, "Retry-After"},
		{"Retry-After date wins", 429, header("Retry-After", "Mon, 30 Nov 2026 12:00:10 GMT", "RateLimit", `"default";r=0;t=5`), "", throttled, 10 * time.Second, "Retry-After"},
		{"Cloudflare capitalisation", 429, http.Header{"Ratelimit": {`"default";r=0;t=30`}, "Retry-After": {"30"}}, "", throttled, 30 * time.Second, "Retry-After"},

		// X-RateLimit-Reset and its forms.
		{"epoch seconds (X)", 429, header("X-Rate-Limit-Reset", "1796040060"), "", throttled, 60 * time.Second, "X-Rate-Limit-Reset"},
		{"decimal epoch (Discord reset)", 429, header("X-RateLimit-Reset", "1796040001.5"), "", throttled, 1500 * time.Millisecond, "X-Ratelimit-Reset"},
		{"epoch milliseconds", 429, header("X-RateLimit-Reset", "1796040030000"), "", throttled, 30 * time.Second, "X-Ratelimit-Reset"},
		{"delta seconds (Zendesk)", 429, header("X-RateLimit-Reset", "41"), "", throttled, 41 * time.Second, "X-Ratelimit-Reset"},
		{"RFC 3339", 429, header("X-RateLimit-Reset", "2026-11-30T12:05:00Z"), "", throttled, 5 * time.Minute, "X-Ratelimit-Reset"},
		{"ISO 8601 minutes (Jira Cloud)", 429, header("X-RateLimit-Reset", "2026-11-30T12:03Z"), "", throttled, 3 * time.Minute, "X-Ratelimit-Reset"},
		{"JavaScript date (lemlist)", 429, header("X-RateLimit-Reset", "Mon Nov 30 2026 13:02:00 GMT+0100 (Central European Standard Time)"), "", throttled, 2 * time.Minute, "X-Ratelimit-Reset"},
		{"HTTP date", 429, header("X-RateLimit-Reset", "Mon, 30 Nov 2026 12:00:20 GMT"), "", throttled, 20 * time.Second, "X-Ratelimit-Reset"},
		{"Reset-After (Discord)", 429, header("X-RateLimit-Reset-After", "64.57", "X-RateLimit-Reset", "1796040064.57"), "", throttled, 65 * time.Second, "X-Ratelimit-Reset-After"},
		{"Discord all three", 429, header("Retry-After", "65", "X-RateLimit-Reset-After", "64.57"), `{"retry_after": 64.57, "global": false}`, throttled, 65 * time.Second, "Retry-After"},

		// OpenAI and Anthropic.
		{"OpenAI durations", 429, header("X-RateLimit-Remaining-Requests", "0", "X-RateLimit-Reset-Requests", "6m0s", "X-RateLimit-Remaining-Tokens", "1000", "X-RateLimit-Reset-Tokens", "12ms"), "", throttled, 6 * time.Minute, "X-Ratelimit-Reset-Requests"},
		{"OpenAI tokens exhausted", 429, header("X-RateLimit-Remaining-Requests", "10", "X-RateLimit-Reset-Requests", "1s", "X-RateLimit-Remaining-Tokens", "0", "X-RateLimit-Reset-Tokens", "6m30s"), "", throttled, 6*time.Minute + 30*time.Second, "X-Ratelimit-Reset-Tokens"},
		{"Anthropic RFC 3339 resets", 429, header("Anthropic-Ratelimit-Requests-Remaining", "0", "Anthropic-Ratelimit-Requests-Reset", "2026-11-30T12:00:40Z", "Anthropic-Ratelimit-Tokens-Reset", "2026-11-30T12:00:05Z"), "", throttled, 40 * time.Second, "Anthropic-Ratelimit-Requests-Reset"},
		{"Anthropic retry-after first", 429, header("Retry-After", "12", "Anthropic-Ratelimit-Requests-Reset", "2026-11-30T12:00:40Z"), "", throttled, 12 * time.Second, "Retry-After"},

		// Bodies.
		{"Discord body only", 429, header(), `{"message": "You are being rate limited.", "retry_after": 0.25, "global": false}`, throttled, time.Second, "body"},
		{"Marketing Cloud body", 429, header(), `{"errorcode": 50100, "retryAfter": 5}`, throttled, 5 * time.Second, "body"},

		// GitHub's 403s.
		{"GitHub primary limit", 403, header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1796040600"), `{"message": "API rate limit exceeded for installation ID 1."}`, throttled, 10 * time.Minute, "X-Ratelimit-Reset"},
		{"GitHub secondary limit with retry-after", 403, header("Retry-After", "60", "X-RateLimit-Remaining", "4000"), `{"message": "You have exceeded a secondary rate limit."}`, throttled, time.Minute, "Retry-After"},
		{"GitHub secondary limit, no header", 403, header("X-RateLimit-Remaining", "4000"), `{"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`, throttled, 60 * time.Second, "default"},
		{"a plain 403 is a permission error", 403, header("X-RateLimit-Remaining", "4999"), `{"message": "Resource not accessible by integration"}`, none, 0, ""},

		// 503 and 529.
		{"503 with a hint", 503, header("Retry-After", "120"), "", throttled, 2 * time.Minute, "Retry-After"},
		{"503 without a hint is a server error", 503, header(), "", none, 0, ""},
		{"Anthropic 529 with a hint", 529, header("Retry-After", "3"), "", throttled, 3 * time.Second, "Retry-After"},

		// Missing, unparseable, negative, huge.
		{"no hint: default", 429, header(), "", throttled, 60 * time.Second, "default"},
		{"garbage: default", 429, header("Retry-After", "soon"), "", throttled, 60 * time.Second, "default"},
		{"negative: ignored", 429, header("Retry-After", "-5"), "", throttled, 60 * time.Second, "default"},
		{"negative falls through to the next signal", 429, header("Retry-After", "-5", "X-RateLimit-Reset", "9"), "", throttled, 9 * time.Second, "X-Ratelimit-Reset"},
		{"exponent refused", 429, header("Retry-After", "1e3"), "", throttled, 60 * time.Second, "default"},
		{"NaN refused", 429, header("Retry-After", "NaN"), "", throttled, 60 * time.Second, "default"},
		{"huge capped at 24h", 429, header("Retry-After", "999999999999"), "", throttled, 24 * time.Hour, "Retry-After"},
		{"huge epoch capped", 429, header("X-RateLimit-Reset", "99999999999999999999999"), "", throttled, 24 * time.Hour, "X-Ratelimit-Reset"},
		{"empty values", 429, header("Retry-After", "", "RateLimit", ""), "", throttled, 60 * time.Second, "default"},
		{"malformed RateLimit ignored", 429, header("RateLimit", `"default";r=zero;t=`), "", throttled, 60 * time.Second, "default"},
		{"invalid JSON body ignored", 429, header(), `{"retry_after": `, throttled, 60 * time.Second, "default"},

		// Successful responses: pause before the 429.
		{"ok: nothing remains (RateLimit list)", 200, header("RateLimit", `"default";r=0;t=30`), "", exhausted, 30 * time.Second, "Ratelimit"},
		{"ok: one policy of two empty", 200, header("RateLimit", `"burst";r=10;t=1, "hour";r=0;t=1800`), "", exhausted, 30 * time.Minute, "Ratelimit"},
		{"ok: quota left", 200, header("RateLimit", `"default";r=50;t=30`), "", none, 0, ""},
		{"ok: dictionary remaining=0", 200, header("RateLimit", "limit=100, remaining=0, reset=12"), "", exhausted, 12 * time.Second, "Ratelimit"},
		{"ok: RateLimit-Remaining 0", 200, header("RateLimit-Remaining", "0", "RateLimit-Reset", "7"), "", exhausted, 7 * time.Second, "Ratelimit-Reset"},
		{"ok: X-RateLimit-Remaining 0 (GitHub)", 200, header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1796040040"), "", exhausted, 40 * time.Second, "X-Ratelimit-Reset"},
		{"ok: Discord remaining 0", 200, header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset-After", "1.2"), "", exhausted, 2 * time.Second, "X-Ratelimit-Reset-After"},
		{"ok: OpenAI remaining 0", 200, header("X-RateLimit-Remaining-Requests", "0", "X-RateLimit-Reset-Requests", "20s"), "", exhausted, 20 * time.Second, "X-Ratelimit-Reset-Requests"},
		{"ok: Anthropic remaining 0", 200, header("Anthropic-Ratelimit-Tokens-Remaining", "0", "Anthropic-Ratelimit-Tokens-Reset", "2026-11-30T12:00:15Z"), "", exhausted, 15 * time.Second, "Anthropic-Ratelimit-Tokens-Reset"},
		{"ok: remaining 0 without a reset", 200, header("X-RateLimit-Remaining", "0"), "", none, 0, ""},
		{"ok: retry-after 0 while tokens remain (Jira DC)", 200, header("Retry-After", "0", "X-RateLimit-Remaining", "30"), "", none, 0, ""},
		{"ok: RateLimit from a cache is ignored", 200, header("RateLimit", `"default";r=0;t=30`, "Age", "12"), "", none, 0, ""},
		{"404 is nothing", 404, header("Retry-After", "10"), "", none, 0, ""},
	}
	p := parser()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := p.Parse(tc.status, tc.h, []byte(tc.body))
			got := none
			switch {
			case h.Throttled && h.Exhausted:
				t.Fatalf("both throttled and exhausted: %+v", h)
			case h.Throttled:
				got = throttled
			case h.Exhausted:
				got = exhausted
			}
			if got != tc.want || h.Wait != tc.wait || h.Source != tc.source {
				t.Fatalf("got %s wait %s source %q, want %s wait %s source %q", got, h.Wait, h.Source, tc.want, tc.wait, tc.source)
			}
			if got != none && !h.Until.Equal(now.Add(h.Wait)) {
				t.Fatalf("Until %s, want now + %s", h.Until, h.Wait)
			}
		})
	}
}

func TestParserSettings(t *testing.T) {
	t.Parallel()
	p := retryafter.Parser{Default: 5 * time.Second, Max: time.Minute, Now: func() time.Time { return now }}
	if h := p.Parse(429, header(), nil); h.Wait != 5*time.Second {
		t.Fatalf("custom default: %s", h.Wait)
	}
	if h := p.Parse(429, header("Retry-After", "3600"), nil); h.Wait != time.Minute {
		t.Fatalf("custom cap: %s", h.Wait)
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	// The classifier's test vectors from the reference document.
	for v, want := range map[string]time.Duration{
		"1796040023.123":       23123 * time.Millisecond, // decimal Unix seconds
		"64.57":                65 * time.Second,         // decimal delta seconds, rounded up
		"41":                   41 * time.Second,         // delta seconds
		"1796040000":           0,                        // Unix seconds: now
		"2026-11-30T12:40:59Z": 40*time.Minute + 59*time.Second,
		"2026-11-30T12:15Z":    15 * time.Minute,
		"Mon Nov 30 2026 12:02:42 GMT+0000 (Coordinated Universal Time)": 2*time.Minute + 42*time.Second,
		"600000": 600000 * time.Second, // Prisjakt's milliseconds read as seconds: documented
		"6m30s":  6*time.Minute + 30*time.Second,
		"12ms":   12 * time.Millisecond,
	} {
		if got, ok := retryafter.Reset(v, now); !ok || got != want {
			t.Errorf("Reset(%q) = %s, %v; want %s", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "-3", "-1s", "tomorrow", "12:00", "0x10", "∞"} {
		if d, ok := retryafter.Reset(v, now); ok {
			t.Errorf("Reset(%q) = %s, want unreadable", v, d)
		}
	}
}

// FuzzParse: any headers and body, never a panic, and a sane hint.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"30", "2.542", "Mon, 30 Nov 2026 12:01:30 GMT", `"default";r=0;t=30`,
		"limit=100, remaining=0, reset=5", "1796040060", "6m0s", "2026-11-30T12:05:00Z", "-1", "1e309", "\x00", `"a\`} {
		f.Add(429, s, s, `{"retry_after": 1}`)
		f.Add(200, "0", s, "")
		f.Add(403, s, "0", "secondary rate limit")
		f.Add(550, s, "0", "")
	}
	p := parser()
	f.Fuzz(func(t *testing.T, status int, v1, v2, body string) {
		for _, names := range [][2]string{
			{"Retry-After", "RateLimit"}, {"Retry-After-Ms", "X-RateLimit-Reset"},
			{"X-RateLimit-Remaining", "X-RateLimit-Reset-After"}, {"RateLimit-Remaining", "RateLimit-Reset"},
			{"X-RateLimit-Remaining-Tokens", "X-RateLimit-Reset-Tokens"}, {"Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
		} {
			h := p.Parse(status, header(names[0], v1, names[1], v2), []byte(body))
			if h.Wait < 0 || h.Wait > retryafter.DefaultMax || (h.Throttled && h.Exhausted) {
				t.Fatalf("status %d %s=%q %s=%q: %+v", status, names[0], v1, names[1], v2, h)
			}
			if (h.Throttled || h.Exhausted) != (h.Source != "") {
				t.Fatalf("source %q for %+v", h.Source, h)
			}
			// Throttled: 429, 403, 503 and 529, or any other 5xx that
			// carries a Retry-After (the package doc's rule).
			if h.Throttled && status != 429 && status != 403 && (status < 500 || status > 599) {
				t.Fatalf("status %d throttled", status)
			}
			if h.Throttled && status >= 500 && status < 600 && status != 503 && status != 529 &&
				names[0] != "Retry-After" && names[0] != "Retry-After-Ms" {
				t.Fatalf("status %d throttled without a Retry-After: %+v", status, h)
			}
			_ = strings.ToLower(h.Source)
		}
	})
}
