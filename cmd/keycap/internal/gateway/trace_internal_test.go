package gateway

import (
	"net/http"
	"strings"
	"testing"
)

func TestTraceID(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tc := range []struct {
		headers []string
		want    string
	}{
		{[]string{"00-" + id + "-00f067aa0ba902b7-01"}, id},
		{[]string{"00-" + id + "-00f067aa0ba902b7-03"}, id}, // other flags beside sampled
		{[]string{"00-" + id + "-00f067aa0ba902b7-00"}, ""}, // not sampled
		{[]string{"00-" + strings.ToUpper(id) + "-00f067aa0ba902b7-01"}, ""},
		{[]string{"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, ""},
		{[]string{"00-" + id + "-0000000000000000-01"}, ""},
		{[]string{"01-" + id + "-00f067aa0ba902b7-01"}, ""},
		{[]string{"00-" + id + "-00f067aa0ba902b7-01-extra"}, ""},
		{[]string{"00-" + id + "-00f067aa0ba902b7-01", "00-" + id + "-00f067aa0ba902b7-01"}, ""},
		{nil, ""},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		for _, h := range tc.headers {
			r.Header.Add("Traceparent", h)
		}
		if got := traceID(r); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.headers, got, tc.want)
		}
	}
}

// FuzzTraceID: whatever the header, the ID is "" or 32 lowercase hex
// digits, not all zero, taken from the header.
func FuzzTraceID(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	f.Add("ff-zz")
	f.Fuzz(func(t *testing.T, v string) {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.Header["Traceparent"] = []string{v}
		id := traceID(r)
		if id == "" {
			return
		}
		if len(id) != 32 || !lowerHex(id) || allZero(id) || !strings.Contains(v, id) {
			t.Fatalf("traceID(%q) = %q", v, id)
		}
	})
}
