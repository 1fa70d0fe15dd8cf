package otelobserver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/otelobserver"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/store"
)

// flaky is a store whose Acquire fails while down.
type flaky struct {
	keycap.Store
	down bool
}

func (f *flaky) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	if f.down {
		return store.Grant{}, errors.New("down")
	}
	return f.Store.Acquire(ctx, pool, owner, d)
}

// TestLimiter: a real Limiter on memstore reports through the Observer, with
// the Acquire's context for its span.
func TestLimiter(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otelobserver.Config{})
	store := &flaky{Store: memstore.New()}
	l, err := keycap.NewLimiter(store, keycap.WithObserver(obs), keycap.WithRecoverAfter(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	ctx, span := tracer.Start(context.Background(), "request")

	exports := keycap.Spec{Name: "exports", Max: 1}.For("user:1")
	// A candidate cap of 0 on another key, watched: refused, never enforced.
	candidate := keycap.Spec{Name: "exports", Max: 0, Shadow: true}.For("user:1")
	a, err := l.Acquire(ctx, exports, candidate)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(ctx, keycap.Spec{Name: "exports", Max: 1}.For("user:2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, exports); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("second export of user:1: %v, want refused", err)
	}
	time.Sleep(5 * time.Millisecond)
	a.Release()
	span.End()

	ms := collect(t, reader)
	for name, want := range map[string]int64{
		"keycap.slot_acquired_count":  2,
		"keycap.limit_exceeded_count": 1,
		"keycap.slot_released_count":  1,
		"keycap.slots_in_use":         1,
	} {
		if got := ms.sum(t, name, slotAttrs(exports)...); got != want {
			t.Errorf("%s{exports} = %d, want %d", name, got, want)
		}
	}
	if got := ms.sum(t, "keycap.limit_exceeded_count", slotAttrs(candidate)...); got != 1 {
		t.Errorf("exceeded{exports, shadow, max 0} = %d, want 1", got)
	}
	if n := ms.points(t, "keycap.slot_acquired_count"); n != 1 {
		t.Errorf("%d acquired series, want 1: the shadow was refused", n)
	}
	if h := ms.hist(t, "keycap.hold_duration", slotAttrs(exports)...); h.Count != 1 || h.Sum < 0.005 {
		t.Errorf("hold: %d, %v s; want 1 hold of at least 5 ms", h.Count, h.Sum)
	}
	if h := ms.hist(t, "keycap.wait_duration", slotAttrs(exports, attribute.String("outcome", "acquired"))...); h.Count != 2 {
		t.Errorf("waits of grants: %d, want 2", h.Count)
	}
	if h := ms.hist(t, "keycap.wait_duration", slotAttrs(exports, attribute.String("outcome", "exceeded"))...); h.Count != 1 {
		t.Errorf("waits of refusals: %d, want 1", h.Count)
	}

	// The Acquire's span has one event per decision, in order.
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans, want 1", len(ended))
	}
	var names []string
	for _, ev := range ended[0].Events() {
		limit, shadow := "", false
		for _, kv := range ev.Attributes {
			switch kv.Key {
			case "limit":
				limit = kv.Value.AsString()
			case "shadow":
				shadow = kv.Value.AsBool()
			}
			if strings.Contains(kv.Value.String(), "user:") {
				t.Errorf("span event %s has the key in %s", ev.Name, kv.Key)
			}
		}
		if shadow {
			limit += " (shadow)"
		}
		names = append(names, ev.Name+" "+limit)
	}
	want := []string{
		"keycap.limit_exceeded exports (shadow)", // the shadow is decided first
		"keycap.slot_acquired exports",
		"keycap.slot_acquired exports",
		"keycap.limit_exceeded exports",
	}
	if strings.Join(names, "; ") != strings.Join(want, "; ") {
		t.Errorf("span events:\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	if ended[0].Status().Code != codes.Unset {
		t.Errorf("span status %v after a refusal, want unset", ended[0].Status().Code)
	}

	// A store outage and its end.
	store.down = true
	_, _ = l.Acquire(context.Background(), keycap.Spec{Name: "reports", Max: 1}.For("user:1"))
	_, _ = l.Acquire(context.Background(), keycap.Spec{Name: "reports", Max: 1}.For("user:1"))
	ms = collect(t, reader)
	node := attribute.String("node", "")
	if n := ms.sum(t, "keycap.store_failure_count", node); n != 1 {
		t.Errorf("%d outages, want 1 (two failures of one outage)", n)
	}
	if up := ms.gauge(t, "keycap.store_up", node); up != 0 {
		t.Errorf("store_up %d during the outage, want 0", up)
	}
	store.down = false
	time.Sleep(2 * time.Millisecond) // past the recover-after time
	ls, err := l.Acquire(context.Background(), keycap.Spec{Name: "reports", Max: 1}.For("user:1"))
	if err != nil {
		t.Fatal(err)
	}
	ls.Release()
	b.Release()
	ms = collect(t, reader)
	if up := ms.gauge(t, "keycap.store_up", node); up != 1 {
		t.Errorf("store_up %d after recovery, want 1", up)
	}
	if n := ms.sum(t, "keycap.store_recovery_count", node); n != 1 {
		t.Errorf("%d recoveries, want 1", n)
	}
	if n := ms.sum(t, "keycap.store_failed_call_count", node); n != 2 {
		t.Errorf("%d failed calls in the outage, want 2", n)
	}
	if h := ms.hist(t, "keycap.store_outage_duration", node); h.Count != 1 || h.Sum <= 0 {
		t.Errorf("outage: %d, %v s; want one outage of some length", h.Count, h.Sum)
	}
	if n := ms.sum(t, "keycap.slots_in_use", slotAttrs(exports)...); n != 0 {
		t.Errorf("exports in use %d once all released, want 0", n)
	}
}

// TestPauses: API pauses report through the same Observer.
func TestPauses(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otelobserver.Config{})
	l, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ps, err := pause.New(l)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		switch n {
		case 1:
			w.Header().Set("Retry-After", "0") // short: retried in place
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.Header().Set("Retry-After", "60") // long: the API pauses
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			_, _ = io.WriteString(w, "ok")
		}
	}))
	defer srv.Close()
	c := &http.Client{Transport: ps.Transport(nil, pause.WithAPIName(func(*http.Request) string { return "vendor" }))}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := c.Get(srv.URL); !errors.Is(err, pause.ErrPaused) {
		t.Fatalf("call while paused: %v", err)
	}
	ms := collect(t, reader)
	api := attribute.String("api", "vendor")
	src := attribute.String("source", "Retry-After")
	if v := ms.sum(t, "keycap.api_throttled_count", api, attribute.Int("status", 429), src); v != 1 {
		t.Errorf("throttled 429: %d, want 1", v)
	}
	if v := ms.sum(t, "keycap.api_throttled_count", api, attribute.Int("status", 503), src); v != 1 {
		t.Errorf("throttled 503: %d, want 1", v)
	}
	if v := ms.sum(t, "keycap.api_retried_count", api); v != 1 {
		t.Errorf("retried: %d, want 1", v)
	}
	if v := ms.sum(t, "keycap.api_held_count", api, attribute.Bool("paced", false)); v != 1 {
		t.Errorf("held: %d, want 1", v)
	}
	if v := ms.sum(t, "keycap.api_paused_count", api); v != 1 {
		t.Errorf("pauses: %d, want 1 (a Retry-After of 0 pauses nothing)", v)
	}
	if h := ms.hist(t, "keycap.api_pause_duration", api); h.Count != 1 || h.Sum < 59 || h.Sum > 60 {
		t.Errorf("pause lengths: %d, %v s; want 1 pause of 60 s", h.Count, h.Sum)
	}
}
