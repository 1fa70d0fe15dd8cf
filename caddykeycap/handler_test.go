package caddykeycap_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/keycap/keycap/caddykeycap"
)

// provision makes a handler of its JSON, as Caddy loads it.
func provision(t testing.TB, js string) (*caddykeycap.Handler, error) {
	t.Helper()
	h := new(caddykeycap.Handler)
	if err := json.Unmarshal([]byte(js), h); err != nil {
		t.Fatal(err)
	}
	err := h.Provision(caddy.Context{})
	if err == nil {
		err = h.Validate()
	}
	if err != nil {
		_ = h.Cleanup() // as Caddy does after a failed provisioning
	}
	return h, err
}

// Provisioning refuses a wrong field, naming the limit and the field as the
// configuration spells them.
func TestProvisionNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ js, says string }{
		{`{}`, "limits: at least one limit is required"},
		{`{"limits":[{"max":1}]}`, "limits[0]: name: required"},
		{`{"limits":[{"name":"a"}]}`, `limit "a": max: required`},
		{`{"limits":[{"name":"a","max":-1}]}`, `limit "a": max: -1: must be at least 0`},
		{`{"limits":[{"name":"a","max":1,"ttl":-1}]}`, `limit "a": ttl: `},
		{`{"limits":[{"name":"a","max":1,"wait":-1}]}`, `limit "a": wait: `},
		{`{"limits":[{"name":"a","max":2,"weight":3}]}`, `limit "a": weight: 3`},
		{`{"limits":[{"name":"a","max":2,"share":2}]}`, `limit "a": share: 2`},
		{`{"limits":[{"name":"a","max":2,"minimum":1}]}`, `limit "a": minimum: 1`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":0}}]}`, `limit "a": parent.max: 0`},
		{`{"limits":[{"name":"a","max":2,"parent":{"max":5}}]}`, `limit "a": parent.name: `},
		{`{"limits":[{"name":"a","max":9,"parent":{"name":"p","max":5}}]}`, `limit "a": max: 9`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":5,"adaptive":{"ceiling":10}}}]}`, `limit "a": parent.adaptive.floor: required`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":5,"adaptive":{"floor":1}}}]}`, `limit "a": parent.adaptive.ceiling: required`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":5,"adaptive":{"floor":-1,"ceiling":10}}}]}`, `limit "a": parent.adaptive.floor: -1: must be at least 1`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":5,"adaptive":{"floor":5,"ceiling":3}}}]}`, `limit "a": parent.adaptive.ceiling: 3: must be at least the floor (5)`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":20,"adaptive":{"floor":1,"ceiling":10}}}]}`, `limit "a": parent.adaptive.floor: 1: the parent's max (20), where the total starts, must be between the floor and the ceiling (10)`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":5,"adaptive":{"floor":1,"ceiling":10,"interval":"5ms"}}}]}`, `limit "a": parent.adaptive.interval: 5ms: must be at least 10ms`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":5,"adaptive":{"floor":1,"ceiling":10,"interval":-1}}}]}`, `limit "a": parent.adaptive.interval: -1ns: must be at least 10ms`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":5,"adaptive":{"floor":1,"ceiling":10,"tolerance":1}}}]}`, `limit "a": parent.adaptive.tolerance: 1: must be above 1`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":5,"adaptive":{"floor":1,"ceiling":10,"tolerance":-2}}}]}`, `limit "a": parent.adaptive.tolerance: -2: must be above 1`},
		{`{"limits":[{"name":"a","max":20,"parent":{"name":"p","max":5,"adaptive":{"floor":1,"ceiling":10}}}]}`, `limit "a": max: 20: must be at most its parent "p"'s max (10)`},
		{`{"limits":[{"name":"a","max":20,"parent":{"name":"p","max":5,"adaptive":{"floor":1,"ceiling":10,"shadow":true}}}]}`, `limit "a": max: 20: must be at most its parent "p"'s max (5)`},
		{`{"limits":[{"name":"a","max":4,"weight":3,"parent":{"name":"p","max":5,"adaptive":{"floor":2,"ceiling":10}}}]}`, `limit "a": weight: 3: must be at most its parent "p"'s floor (2)`},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"","max":5,"adaptive":{"floor":1}}}]}`, `limit "a": parent.name: `},
		{`{"limits":[{"name":"a","max":2,"parent":{"name":"p","max":5}},{"name":"b","max":2,"parent":{"name":"p","max":5}}]}`, `limit "b": parent.name: "p" is also the parent of limit "a"`},
		{`{"limits":[{"name":"a","max":1,"fail_mode":"sometimes"}]}`, `limit "a": fail_mode: "sometimes"`},
		{`{"limits":[{"name":"a","max":1,"empty_key":"skip"}]}`, `limit "a": empty_key: "skip"`},
		{`{"limits":[{"name":"a","max":1,"retry_after":-1}]}`, `limit "a": retry_after: -1ns`},
		{`{"limits":[{"name":"a","max":1},{"name":"a","max":2}]}`, `limit "a": name: used by another limit`},
		{`{"limits":[{"name":"a","max":1}],"store":{"type":"etcd"}}`, `store: type: "etcd"`},
		{`{"limits":[{"name":"a","max":1}],"store":{"type":"redis"}}`, `store: addr: required`},
		{`{"limits":[{"name":"a","max":1}],"store":{"type":"cluster","addr":"x:1"}}`, `store: addrs: required`},
		{`{"limits":[{"name":"a","max":1}],"store":{"type":"sentinel","addrs":["x:1"]}}`, `store: master: required`},
		{`{"limits":[{"name":"a","max":1}],"store":{"type":"redis","addr":"x:1","prefix":"{a}"}}`, `store: prefix: "{a}"`},
		{`{"limits":[{"name":"a","max":1}],"store":{"addr":"x:1"}}`, `store: type: memory takes no address`},
		{`{"limits":[{"name":"a","max":1}],"store":{"budget":"1s"}}`, `store: budget: for redis`},
		{`{"limits":[{"name":"a","max":1}],"store":{"type":"memory","tls":true}}`, `store: tls: for redis`},
	} {
		_, err := provision(t, tc.js)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %v, want %q", tc.js, err, tc.says)
		}
	}
}

// Handlers with the same store share one Limiter, so their limits of the
// same name share slots; it lives while one of them does (a config reload
// provisions the new handlers before it cleans up the old), and the last
// cleanup closes it.
func TestHandlersShareTheStoresLimiter(t *testing.T) {
	t.Parallel()
	// a store of this test's own: another test's handlers never share it
	const cfg = `{"limits":[{"name":"shared","key":"k","max":1}],"store":{"prefix":"handlers-share-test"}}`
	a, err := provision(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := provision(t, cfg)
	if err != nil {
		t.Fatal(err)
	}

	// a holds the slot while its next handler runs; b is refused meanwhile
	var inside int
	err = a.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil),
		caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
			inside = status(b.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil), ok))
			return nil
		}))
	if err != nil || inside != http.StatusTooManyRequests {
		t.Fatalf("a: %v; b while a holds the slot: %d, want 429", err, inside)
	}

	// a reload: c provisioned, a cleaned up; b and c still share it
	c, err := provision(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Cleanup(); err != nil {
		t.Fatal(err)
	}
	err = b.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil),
		caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
			inside = status(c.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil), ok))
			return nil
		}))
	if err != nil || inside != http.StatusTooManyRequests {
		t.Fatalf("b: %v; c while b holds the slot: %d, want 429", err, inside)
	}

	// the last cleanup closes the Limiter: c now answers 503
	_ = b.Cleanup()
	_ = c.Cleanup()
	if got := status(c.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil), ok)); got != http.StatusServiceUnavailable {
		t.Fatalf("after the last cleanup: %d, want 503 (limiter closed)", got)
	}
}

var ok = caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })

// status is the HTTP status of a handler's result: 200 for nil.
func status(err error) int {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) {
		return he.StatusCode
	}
	if err != nil {
		return http.StatusInternalServerError
	}
	return http.StatusOK
}
