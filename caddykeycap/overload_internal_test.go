package caddykeycap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/keycap/keycap"
	"github.com/keycap/keycap/store"
)

// What the next handler wrote or returned is an overload signal for an
// adaptive parent when the backend says it cannot take more; another
// keycap handler's refusal, a client gone, an upstream down are not.
func TestOverloadSignals(t *testing.T) {
	t.Parallel()
	timeout := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name   string
		status int
		err    error
		want   bool
	}{
		{"200", http.StatusOK, nil, false},
		{"nothing written", 0, nil, false},
		{"429", http.StatusTooManyRequests, nil, true},
		{"503", http.StatusServiceUnavailable, nil, true},
		{"504", http.StatusGatewayTimeout, nil, true},
		{"529", 529, nil, true},
		{"500", http.StatusInternalServerError, nil, false},
		{"502 error: upstream down", 0, caddyhttp.Error(http.StatusBadGateway, errors.New("connection refused")), false},
		{"503 error", 0, caddyhttp.Error(http.StatusServiceUnavailable, errors.New("no upstreams available")), true},
		{"504 error", 0, caddyhttp.Error(http.StatusGatewayTimeout, timeout), true},
		{"429 error", 0, fmt.Errorf("wrapped: %w", caddyhttp.Error(http.StatusTooManyRequests, errors.New("busy"))), true},
		{"net timeout", 0, timeout, true},
		{"deadline", 0, fmt.Errorf("call: %w", context.DeadlineExceeded), true},
		{"499 error: client gone", 0, caddyhttp.Error(499, context.Canceled), false},
		{"another keycap's 429", 0, caddyhttp.Error(http.StatusTooManyRequests, &keycap.LimitError{}), false},
		{"another keycap's 503", 0, caddyhttp.Error(http.StatusServiceUnavailable, fmt.Errorf("x: %w", keycap.ErrStoreUnavailable)), false},
	} {
		if got := overloaded(tc.status, tc.err); got != tc.want {
			t.Errorf("%s: overloaded %v, want %v", tc.name, got, tc.want)
		}
	}
}

// An adaptive parent on a store that cannot keep its total is refused when
// the handler is provisioned, naming the field; every store the module
// offers keeps totals.
func TestAdaptiveParentNeedsTotals(t *testing.T) {
	t.Parallel()
	limits, err := compileLimits([]LimitConfig{
		{Name: "plain", Max: new(1)},
		{Name: "api", Max: new(5), Parent: &ParentConfig{Name: "db", Max: 5, Adaptive: &AdaptiveConfig{Floor: 1, Ceiling: 10}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = needTotals(limits, "lines-only", store.Lines)
	if err == nil || !strings.Contains(err.Error(), `limit "api": parent.adaptive: the store (lines-only) cannot keep an adaptive total`) {
		t.Fatalf("error %v", err)
	}
	if err := needTotals(limits[:1], "lines-only", store.Lines); err != nil {
		t.Fatalf("a fixed limit: %v", err)
	}
	for _, c := range []StoreConfig{{Type: StoreMemory, Prefix: "needs-totals"}, {Type: StoreRedis, Addr: "127.0.0.1:1"}} {
		sl, err := newLimiter(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := needTotals(limits, c.Type, sl.features); err != nil {
			t.Errorf("%s: %v", c.Type, err)
		}
		_ = sl.Destruct()
	}
}

// A parent's adaptive block in JSON becomes the keycap.Adaptive of the
// limit's parent, with keycap's defaults for what it leaves out.
func TestAdaptiveConfigMapsToKeycap(t *testing.T) {
	t.Parallel()
	var h Handler
	if err := json.Unmarshal([]byte(`{"limits":[
		{"name":"api","max":10,"parent":{"name":"backend","max":20,
			"adaptive":{"floor":2,"ceiling":40,"interval":"100ms","tolerance":1.5,"overloads_only":true,"shadow":true}}},
		{"name":"search","max":5,"parent":{"name":"pool","max":8,"adaptive":{"floor":1,"ceiling":16}}},
		{"name":"fixed","max":3,"parent":{"name":"other","max":6}},
		{"name":"watch","max":3,"shadow":true,"parent":{"name":"other","max":6}},
		{"name":"try","max":3,"shadow":true,"parent":{"name":"backend","max":20,"adaptive":{"floor":2,"ceiling":40}}}]}`), &h); err != nil {
		t.Fatal(err)
	}
	limits, err := compileLimits(h.Limits)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []*keycap.Adaptive{
		{Floor: 2, Ceiling: 40, Interval: 100 * time.Millisecond, Tolerance: 1.5, OverloadsOnly: true, Shadow: true},
		{Floor: 1, Ceiling: 16, Interval: keycap.DefaultInterval, Tolerance: keycap.DefaultTolerance},
		nil,
		nil, // a shadow limit may name its handler's parent: its slots are apart
		{Floor: 2, Ceiling: 40, Interval: keycap.DefaultInterval, Tolerance: keycap.DefaultTolerance},
	} {
		l := limits[i]
		got, ok := l.spec.Parent.Adaptive()
		if ok != (want != nil) || ok && got != *want {
			t.Errorf("limit %q: adaptive %+v (%v), want %+v", l.spec.Name, got, ok, want)
		}
		// keycap counts a shadow limit's parent at its max: nothing to report
		if mark := ok && !l.spec.Shadow; l.adaptive != mark {
			t.Errorf("limit %q: marked adaptive %v, want %v", l.spec.Name, l.adaptive, mark)
		}
	}
}
