package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTryHints: keycap try sends the headers it is given, and says what to
// do when every answer is 401 (a route that reads a token) or 404.
func TestTryHints(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/report":
			http.NotFound(w, r)
		case r.Header.Get("Authorization") != "Bearer t0ken" || r.Header.Get("X-Tenant") != "acme":
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer srv.Close()
	var out strings.Builder
	if err := Try(&out, srv.URL+"/report", 4, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Every request was answered 401") || !strings.Contains(out.String(), "-token TOKEN") {
		t.Errorf("every answer 401, no hint:\n%s", out.String())
	}
	out.Reset()
	if err := Try(&out, srv.URL+"/nope", 4, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no route of the gateway serves") {
		t.Errorf("every answer 404, no hint:\n%s", out.String())
	}
	out.Reset()
	h := http.Header{}
	h.Set("Authorization", "Bearer t0ken")
	h.Set("X-Tenant", "acme")
	if err := Try(&out, srv.URL+"/report", 4, h); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "alice       4       0     0") || strings.Contains(out.String(), "Every request") {
		t.Errorf("with the headers, every request served:\n%s", out.String())
	}
}
