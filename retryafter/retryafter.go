// Package retryafter reads every throttling hint real HTTP APIs send, and
// says whether a response is throttled, how long to stay away, and which
// signal said so.
//
//	h := retryafter.Parse(resp.StatusCode, resp.Header, peekedBody)
//	if h.Throttled {
//		// come back in h.Wait (until h.Until); h.Source names the signal
//	}
//
// # What is throttled
//
// A 429 always is. A 503 (or Anthropic's 529) is when it carries a hint: one
// without is an ordinary server error. Any other 5xx is when it carries a
// Retry-After (or Retry-After-Ms): the server asked to be left alone for
// that long, whatever its status, so the hint is honoured; other hints on a
// 500 (a reset header) are not, since they describe a quota, not the error. A 403 is when it says so, as GitHub
// does: X-RateLimit-Remaining: 0, a Retry-After, or a body that speaks of a
// rate limit ("secondary rate limit", "API rate limit exceeded"). A throttled
// response with no usable hint waits Parser.Default (60 s).
//
// A response that went through but says nothing remains (RateLimit with r=0,
// X-RateLimit-Remaining: 0, OpenAI's and Anthropic's remaining counts at 0) is
// Exhausted: its Wait runs to the reset it announces, so that callers can
// pause before the 429 rather than after it.
//
// # Where the wait comes from, first found first
//
//  1. Retry-After-Ms: milliseconds, decimals allowed (OpenAI's SDKs).
//  2. Retry-After: whole or decimal seconds ("2", "2.0", "2.542", rounded up
//     to the next whole second, never down), an HTTP date in any of its
//     three forms (IMF-fixdate, RFC 850, asctime), or an RFC 3339 / ISO 8601
//     time, as X-RateLimit-Reset accepts; a past date means now. A response
//     with several (several header lines, or a list of numbers) waits the
//     longest.
//  3. The IETF RateLimit fields, every generation: RateLimit as a list
//     ("default";r=0;t=30, draft -08 and later: t of the policies with r=0,
//     else the largest t), RateLimit as a dictionary (limit=100, remaining=0,
//     reset=5, draft -07), and RateLimit-Reset (drafts up to -06). As the
//     drafts require, Retry-After takes precedence over all of them.
//  4. X-RateLimit-Reset-After (Discord): delta seconds, decimals allowed.
//  5. X-RateLimit-Reset, X-Rate-Limit-Reset: classified by its form (below).
//  6. OpenAI's x-ratelimit-reset-requests and -tokens: Go durations ("6m0s",
//     "12ms"), the one whose remaining count is 0, else the longer.
//  7. Anthropic's anthropic-ratelimit-*-reset: RFC 3339 times, the one whose
//     remaining count is 0, else the latest.
//  8. A JSON body's top-level "retry_after" or "retryAfter", in seconds
//     (Discord, Salesforce Marketing Cloud).
//
// # Epoch or delta: how a reset value is read
//
//   - With letters in it, it is a time or a duration: a Go duration ("6m30s"),
//     RFC 3339 or ISO 8601 (seconds optional: Jira's "2024-03-02T10:15Z"), an
//     HTTP date, or a JavaScript Date string ("Tue Feb 16 2021 09:02:42
//     GMT+0100 (Central European Standard Time)").
//   - A number of 1e12 or more is Unix milliseconds.
//   - A number of 1e9 or more (from 2001 on) is Unix seconds, decimals allowed
//     (Discord's "1470173023.123").
//   - Anything smaller is delta seconds, decimals allowed, rounded up.
//
// A delta in milliseconds (Prisjakt's "600000") cannot be told from seconds by
// its form: it is read as seconds, and capped.
//
// # Bad input
//
// Values that are negative, not numbers, not dates, NaN or infinite are
// ignored, and the next signal is tried; every wait is capped by Parser.Max
// (24 h). Nothing panics: the parser is fuzzed.
package retryafter

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/keycap/keycap/internal/header"
)

// Hint is what a response says about when to call again.
type Hint struct {
	// Throttled: the request was refused for its rate; wait before sending
	// another.
	Throttled bool
	// Exhausted: the request went through, but nothing remains until Until.
	Exhausted bool
	// Wait is how long to stay away, from the moment the response was read,
	// capped by the parser's Max. 0 when neither Throttled nor Exhausted, or
	// when the hint says "now".
	Wait time.Duration
	// Until is when the wait ends (zero when neither Throttled nor Exhausted).
	Until time.Time
	// Source names the signal that gave the wait: a header's canonical name
	// ("Retry-After", "Ratelimit", "X-Ratelimit-Reset", ...), "body", or
	// "default" for a throttled response without a usable hint.
	Source string
}

// Defaults of a Parser.
const (
	DefaultWait = 60 * time.Second
	DefaultMax  = 24 * time.Hour
)

// Parser reads hints. The zero Parser uses the defaults.
type Parser struct {
	// Default is the wait of a throttled response without a usable hint.
	// 0 means DefaultWait.
	Default time.Duration
	// Max caps every wait, so that an absurd value ("Retry-After:
	// 999999999") cannot park a caller for years. 0 means DefaultMax.
	Max time.Duration
	// Now returns the current time, to which dates are compared. nil means
	// time.Now.
	Now func() time.Time
}

// Parse reads a response with the default Parser.
func Parse(status int, h http.Header, body []byte) Hint {
	return Parser{}.Parse(status, h, body)
}

// Parse reads the hint of a response: its status, its headers, and
// optionally the start of its body (a few KB are plenty; nil is fine).
func (p Parser) Parse(status int, h http.Header, body []byte) Hint {
	switch {
	case status == http.StatusTooManyRequests, status == http.StatusServiceUnavailable, status == 529, status == http.StatusForbidden:
	case status >= 500 && status < 600:
		if h.Get("Retry-After") == "" && h.Get("Retry-After-Ms") == "" {
			return Hint{}
		}
	case status >= 200 && status < 400:
		if len(h) == 0 {
			return Hint{}
		}
		now := p.now()
		if d, src, ok := exhausted(h, now); ok {
			return p.hint(false, true, d, src, now)
		}
		return Hint{}
	default:
		return Hint{}
	}
	now := p.now()
	if d, src, ok := p.wait(h, body, now); ok && throttledStatus(status, h, body, true) {
		return p.hint(true, false, d, src, now)
	}
	if throttledStatus(status, h, body, false) {
		def := p.Default
		if def <= 0 {
			def = DefaultWait
		}
		return p.hint(true, false, def, "default", now)
	}
	return Hint{}
}

func (p Parser) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p Parser) hint(throttled, exhausted bool, d time.Duration, src string, now time.Time) Hint {
	limit := p.Max
	if limit <= 0 {
		limit = DefaultMax
	}
	d = min(max(d, 0), limit)
	return Hint{Throttled: throttled, Exhausted: exhausted, Wait: d, Until: now.Add(d), Source: src}
}

// throttledStatus reports whether a response is throttled; hinted says
// whether it carries a usable hint.
func throttledStatus(status int, h http.Header, body []byte, hinted bool) bool {
	switch status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable, 529:
		return hinted
	case http.StatusForbidden:
		if remaining(h, "X-Ratelimit-Remaining") == 0 || remaining(h, "X-Rate-Limit-Remaining") == 0 || h.Get("Retry-After") != "" {
			return true
		}
		return strings.Contains(strings.ToLower(string(body[:min(len(body), 4096)])), "rate limit")
	default:
		// Other 5xx: Parse only gets here with a Retry-After.
		return status >= 500 && status < 600 && hinted
	}
}

// remaining parses a remaining-count header: -1 when absent or unparseable.
func remaining(h http.Header, name string) float64 {
	v := strings.TrimSpace(h.Get(name))
	if v == "" {
		return -1
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return -1
	}
	return f
}

// wait finds the wait of a throttled response, in the order documented on
// the package.
func (p Parser) wait(h http.Header, body []byte, now time.Time) (time.Duration, string, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if f, ok := number(v); ok {
			return ceilDuration(f * float64(time.Millisecond)), "Retry-After-Ms", true
		}
	}
	if d, ok := longestRetryAfter(h.Values("Retry-After"), now); ok {
		return d, "Retry-After", true
	}
	if d, src, ok := rateLimitFields(h, false); ok {
		return d, src, true
	}
	if v := h.Get("X-Ratelimit-Reset-After"); v != "" {
		if f, ok := number(v); ok {
			return seconds(f), "X-Ratelimit-Reset-After", true
		}
	}
	for _, name := range []string{"X-Ratelimit-Reset", "X-Rate-Limit-Reset"} {
		if v := h.Get(name); v != "" {
			if d, ok := Reset(v, now); ok {
				return d, name, true
			}
		}
	}
	if d, src, ok := vendorResets(h, now, false); ok {
		return d, src, true
	}
	if d, ok := bodyRetryAfter(body); ok {
		return d, "body", true
	}
	return 0, "", false
}

// exhausted finds the reset of a response that says nothing remains.
func exhausted(h http.Header, now time.Time) (time.Duration, string, bool) {
	if age, err := strconv.Atoi(strings.TrimSpace(h.Get("Age"))); err != nil || age <= 0 {
		// The IETF fields are to be ignored on responses served from a cache.
		if d, src, ok := rateLimitFields(h, true); ok {
			return d, src, true
		}
	}
	for _, prefix := range []string{"X-Ratelimit-", "X-Rate-Limit-"} {
		if remaining(h, prefix+"Remaining") != 0 {
			continue
		}
		if v := h.Get(prefix + "Reset-After"); v != "" {
			if f, ok := number(v); ok {
				return seconds(f), prefix + "Reset-After", true
			}
		}
		if v := h.Get(prefix + "Reset"); v != "" {
			if d, ok := Reset(v, now); ok {
				return d, prefix + "Reset", true
			}
		}
	}
	return vendorResets(h, now, true)
}

// longestRetryAfter returns the longest of the usable Retry-After values: a
// response that sends several means at least the longest.
func longestRetryAfter(values []string, now time.Time) (time.Duration, bool) {
	var best time.Duration
	found := false
	for _, v := range values {
		for _, part := range retryAfterParts(v) {
			if d, ok := retryAfter(part, now); ok && (!found || d > best) {
				best, found = d, true
			}
		}
	}
	return best, found
}

// retryAfterParts splits a Retry-After line that is a list of numbers
// ("120, 60"); any other line, a date with its comma among them, is one
// value.
func retryAfterParts(v string) []string {
	parts := strings.Split(v, ",")
	if len(parts) == 1 {
		return parts
	}
	for _, p := range parts {
		if _, ok := number(strings.TrimSpace(p)); !ok {
			return []string{v}
		}
	}
	return parts
}

// retryAfter parses a Retry-After value: seconds (decimals rounded up), an
// HTTP date, or an RFC 3339 / ISO 8601 time.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if f, ok := number(v); ok {
		return seconds(f), true
	}
	if t, ok := parseTime(v); ok {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// number parses a non-negative, finite decimal number.
func number(v string) (float64, bool) {
	v = strings.TrimSpace(v)
	if v == "" || v[0] == '-' || v[0] == '+' {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < '0' || c > '9') && c != '.' {
			return 0, false // no exponents, hex, "Inf", "NaN"
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// seconds turns decimal seconds into a duration, rounded up to the next
// whole second. Values too large for a Duration saturate (and are capped
// later).
func seconds(f float64) time.Duration {
	return ceilDuration(math.Ceil(f) * float64(time.Second))
}

func ceilDuration(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(math.Ceil(ns))
}

// Reset reads a rate-limit reset value, whatever its form (see the package
// documentation): it returns how long from now until the reset, 0 for a time
// in the past, and false when the value cannot be read.
func Reset(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if f, ok := number(v); ok {
		switch {
		case f >= 1e12: // Unix milliseconds
			return untilUnix(f/1e3, now), true
		case f >= 1e9: // Unix seconds
			return untilUnix(f, now), true
		}
		return seconds(f), true
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return 0, false
		}
		return d, true
	}
	if t, ok := parseTime(v); ok {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func untilUnix(secs float64, now time.Time) time.Duration {
	if secs > 1e15 { // tens of millions of years away: beyond any cap
		return math.MaxInt64
	}
	whole, frac := math.Modf(secs)
	// A float64 epoch carries about seven digits after the point: round the
	// fraction to the microsecond, below which it is noise.
	t := time.Unix(int64(whole), int64(math.Round(frac*1e6))*1e3)
	return max(t.Sub(now), 0)
}

// timeLayouts are the date forms reset headers use, beside HTTP dates.
var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04Z07:00", // Jira Cloud: minute precision
	"2006-01-02T15:04:05",    // ISO 8601 without a zone: UTC
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05",
	"Mon Jan 02 2006 15:04:05 GMT-0700", // JavaScript Date, its "(zone name)" removed
}

func parseTime(v string) (time.Time, bool) {
	if t, err := http.ParseTime(v); err == nil {
		return t, true
	}
	if i := strings.Index(v, " ("); i > 0 && strings.HasSuffix(v, ")") {
		v = v[:i] // JavaScript's "(Central European Standard Time)"
	}
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// rateLimitFields reads the IETF RateLimit fields. With onlyExhausted, only a
// policy whose remaining count is 0 gives a wait.
func rateLimitFields(h http.Header, onlyExhausted bool) (time.Duration, string, bool) {
	if v := strings.Join(h.Values("Ratelimit"), ","); v != "" {
		if d, ok := rateLimitField(v, onlyExhausted); ok {
			return d, "Ratelimit", true
		}
	}
	if v := h.Get("Ratelimit-Reset"); v != "" {
		if onlyExhausted && remaining(h, "Ratelimit-Remaining") != 0 {
			return 0, "", false
		}
		if f, ok := number(v); ok {
			return seconds(f), "Ratelimit-Reset", true
		}
	}
	return 0, "", false
}

// rateLimitField reads a RateLimit field in either of its forms: an SF List
// of policies with r and t parameters (draft -08 and later), or an SF
// Dictionary with remaining and reset (draft -07). Malformed members are
// ignored, as the draft requires.
func rateLimitField(v string, onlyExhausted bool) (time.Duration, bool) {
	var best, bestExhausted time.Duration
	var found, foundExhausted bool
	dict := map[string]string{}
	for _, member := range header.SplitQuoted(v, ',') {
		params := header.SplitQuoted(member, ';')
		first := strings.TrimSpace(params[0])
		if name, value, ok := strings.Cut(first, "="); ok && len(params) == 1 && !strings.HasPrefix(first, `"`) {
			dict[strings.ToLower(strings.TrimSpace(name))] = strings.TrimSpace(value)
			continue
		}
		r, t := -1.0, -1.0
		for _, p := range params[1:] {
			name, value, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok {
				continue
			}
			f, ok := number(value)
			if !ok {
				continue
			}
			switch strings.TrimSpace(name) {
			case "r":
				r = f
			case "t":
				t = f
			}
		}
		if t < 0 {
			continue
		}
		d := seconds(t)
		found, best = true, max(best, d)
		if r == 0 {
			foundExhausted, bestExhausted = true, max(bestExhausted, d)
		}
	}
	if reset, ok := dict["reset"]; ok {
		if f, ok := number(reset); ok {
			rem, remOK := number(dict["remaining"])
			d := seconds(f)
			found, best = true, max(best, d)
			if remOK && rem == 0 {
				foundExhausted, bestExhausted = true, max(bestExhausted, d)
			}
		}
	}
	switch {
	case foundExhausted:
		return bestExhausted, true
	case found && !onlyExhausted:
		return best, true
	}
	return 0, false
}

// budget names a vendor's remaining-count header and its reset header.
type budget struct{ remaining, reset string }

// budgets are OpenAI's and Anthropic's: one per kind of quota.
var budgets = []budget{
	{"X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
	{"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
	{"Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	{"Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
	{"Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
	{"Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
}

// vendorResets reads OpenAI's and Anthropic's reset headers: the reset of a
// budget whose remaining count is 0 if any, else (unless onlyExhausted) the
// longest.
func vendorResets(h http.Header, now time.Time, onlyExhausted bool) (time.Duration, string, bool) {
	var best, bestExhausted time.Duration
	var src, srcExhausted string
	for _, b := range budgets {
		v := h.Get(b.reset)
		if v == "" {
			continue
		}
		d, ok := Reset(v, now)
		if !ok {
			continue
		}
		if remaining(h, b.remaining) == 0 && (srcExhausted == "" || d > bestExhausted) {
			bestExhausted, srcExhausted = d, b.reset
		}
		if src == "" || d > best {
			best, src = d, b.reset
		}
	}
	switch {
	case srcExhausted != "":
		return bestExhausted, srcExhausted, true
	case src != "" && !onlyExhausted:
		return best, src, true
	}
	return 0, "", false
}

// bodyRetryAfter reads a JSON body's top-level retry_after or retryAfter, in
// seconds.
func bodyRetryAfter(body []byte) (time.Duration, bool) {
	if len(body) == 0 || !json.Valid(body) {
		return 0, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return 0, false
	}
	for _, k := range []string{"retry_after", "retryAfter"} {
		raw, ok := m[k]
		if !ok {
			continue
		}
		var f float64
		if json.Unmarshal(raw, &f) == nil && f >= 0 && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return seconds(f), true
		}
	}
	return 0, false
}
