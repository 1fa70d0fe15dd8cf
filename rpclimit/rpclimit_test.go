package rpclimit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/rpclimit"
)

func newLimits(t *testing.T, opts ...rpclimit.Option) (*keycap.Limiter, *rpclimit.Limiters) {
	t.Helper()
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = limiter.Close() })
	limits, err := rpclimit.New(limiter, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return limiter, limits
}

func call(procedure string, md ...string) *rpclimit.Call {
	m := map[string][]string{}
	for i := 0; i+1 < len(md); i += 2 {
		m[md[i]] = append(m[md[i]], md[i+1])
	}
	return &rpclimit.Call{Procedure: procedure, Peer: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4000}, Metadata: func(name string) []string { return m[strings.ToLower(name)] }}
}

func TestPatterns(t *testing.T) {
	_, limits := newLimits(t)
	for _, bad := range []string{"", "/", "/svc", "svc/m", "/svc/", "//m", "/svc/m/x", "/s*/m", "/svc/m*", "**"} {
		if err := limits.Set(bad, rpclimit.Max(1)); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
	if err := limits.For("*", nil); err == nil {
		t.Error("a nil function accepted")
	}
	// The most specific pattern decides, alone: a max of 0 refuses, nil
	// lets through.
	_ = limits.Set("*", rpclimit.Max(0))
	_ = limits.Set("/a.S/*", nil)
	_ = limits.Set("/a.S/Refused", rpclimit.Max(0))
	ctx := context.Background()
	for proc, refused := range map[string]bool{"/a.S/Open": false, "/a.S/Refused": true, "/b.S/Any": true} {
		ran := false
		r := refusal(limits.Run(ctx, call(proc), func(context.Context) { ran = true }))
		if (r != nil) != refused || ran == refused {
			t.Errorf("%s: refusal %v, ran %v; want refused %v", proc, r, ran, refused)
		}
		if r != nil && (r.Code != rpclimit.ResourceExhausted || !errors.Is(r, keycap.ErrLimitExceeded)) {
			t.Errorf("%s: %v, want ResourceExhausted matching ErrLimitExceeded", proc, r)
		}
	}
}

// TestAllWithSkippedKey: a rule of several limits shared by every call is
// never changed by a call that leaves one of them out.
func TestAllWithSkippedKey(t *testing.T) {
	_, limits := newLimits(t)
	rule := rpclimit.All(
		rpclimit.Max(5).ByMetadata("x-team").IfMissing(rpclimit.SkipIfMissing),
		rpclimit.Max(0).ByMetadata("x-tenant").RetryAfter(3*time.Second),
	)
	_ = limits.Set("*", rule)
	ctx := context.Background()
	for i := range 4 {
		md := []string{"x-tenant", "t", "x-team", "a"}
		if i%2 == 1 {
			md = md[:2] // no team: the first limit is skipped
		}
		r := refusal(limits.Run(ctx, call("/a.S/M", md...), func(context.Context) { t.Error("ran over a max of 0") }))
		if r == nil || r.RetryAfter != 3*time.Second {
			t.Fatalf("call %d: %+v, want the x-tenant limit's refusal with its 3 s", i, r)
		}
	}
}

func TestInvalidLimitIsInternalAndLogged(t *testing.T) {
	var buf bytes.Buffer
	_, limits := newLimits(t, rpclimit.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	_ = limits.Set("/a.S/Neg", rpclimit.Max(-1))
	_ = limits.Set("/a.S/Retry", rpclimit.Max(1).RetryAfter(-time.Second))
	for _, proc := range []string{"/a.S/Neg", "/a.S/Retry"} {
		r := refusal(limits.Run(context.Background(), call(proc), func(context.Context) { t.Error("ran") }))
		if r == nil || r.Code != rpclimit.Internal || !errors.Is(r, keycap.ErrInvalidLimit) {
			t.Errorf("%s: %+v, want Internal matching ErrInvalidLimit", proc, r)
		}
		if !strings.Contains(buf.String(), proc) {
			t.Errorf("%s not logged: %s", proc, buf.String())
		}
	}
}

func TestOnRefuse(t *testing.T) {
	var got []error
	_, limits := newLimits(t, rpclimit.WithOnRefuse(func(_ context.Context, c *rpclimit.Call, err error) { got = append(got, err) }))
	_ = limits.Set("/a.S/Zero", rpclimit.Max(0))
	_ = limits.Set("/a.S/Keyed", rpclimit.Max(1).ByMetadata("x-tenant"))
	ctx := context.Background()
	limits.Run(ctx, call("/a.S/Zero"), func(context.Context) {})
	if r := refusal(limits.Run(ctx, call("/a.S/Keyed"), func(context.Context) {})); r == nil || r.Code != rpclimit.InvalidArgument || !errors.Is(r, rpclimit.ErrMissingKey) {
		t.Errorf("missing key: %+v", r)
	}
	if len(got) != 2 || !errors.Is(got[0], keycap.ErrLimitExceeded) || !errors.Is(got[1], rpclimit.ErrMissingKey) {
		t.Errorf("OnRefuse saw %v", got)
	}
}

func TestContextEndsWhileWaiting(t *testing.T) {
	_, limits := newLimits(t)
	_ = limits.Set("*", rpclimit.Limit(keycap.Spec{Max: 1, Wait: time.Minute}).By("one"))
	ctx := context.Background()
	hold, held := make(chan struct{}), make(chan struct{})
	go limits.Run(ctx, call("/a.S/M"), func(context.Context) { close(held); <-hold })
	defer close(hold)
	select {
	case <-held:
	case <-time.After(15 * time.Second):
		t.Fatal("the holding call never ran")
	}
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if r := refusal(limits.Run(dctx, call("/a.S/M"), func(context.Context) {})); r == nil || r.Code != rpclimit.DeadlineExceeded {
		t.Errorf("deadline while waiting: %+v", r)
	}
	cctx, cancel2 := context.WithCancel(ctx)
	cancel2()
	if r := refusal(limits.Run(cctx, call("/a.S/M"), func(context.Context) {})); r == nil || r.Code != rpclimit.Canceled {
		t.Errorf("cancelled: %+v", r)
	}
}

func TestThrottled(t *testing.T) {
	sec := []time.Duration{time.Second}
	for _, tc := range []struct {
		code     rpclimit.Code
		pushback []string
		info     []time.Duration
		unhinted time.Duration
		want     time.Duration
	}{
		{rpclimit.ResourceExhausted, nil, sec, 0, time.Second},
		{rpclimit.ResourceExhausted, []string{"2500"}, sec, 0, 2500 * time.Millisecond},
		{rpclimit.ResourceExhausted, nil, nil, 0, 0},
		{rpclimit.ResourceExhausted, nil, nil, 3 * time.Second, 3 * time.Second},
		{rpclimit.ResourceExhausted, []string{"1", "2"}, nil, 0, 0}, // several values: none is trusted
		{rpclimit.ResourceExhausted, []string{"-1"}, nil, 0, 0},     // "do not retry": no pause either
		{rpclimit.ResourceExhausted, []string{"99999999999999999999"}, nil, 0, 0},
		{rpclimit.Unavailable, []string{"300"}, nil, time.Second, 300 * time.Millisecond},
		{rpclimit.Unavailable, nil, sec, time.Second, 0},
		{rpclimit.Internal, []string{"300"}, sec, time.Second, 0},
	} {
		if got := rpclimit.Throttled(tc.code, tc.pushback, tc.info, tc.unhinted); got != tc.want {
			t.Errorf("Throttled(%d, %q, %v, %v) = %v, want %v", tc.code, tc.pushback, tc.info, tc.unhinted, got, tc.want)
		}
	}
	if s := rpclimit.Service("/a.b.S/M"); s != "a.b.S" {
		t.Errorf("Service: %q", s)
	}
	for d, want := range map[time.Duration]string{time.Second: "1000", 1500 * time.Microsecond: "2", time.Nanosecond: "1"} {
		if v, ok := (&rpclimit.Refusal{RetryAfter: d}).Pushback(); !ok || v != want {
			t.Errorf("Pushback of %v: %q, want %q", d, v, want)
		}
	}
	if _, ok := (&rpclimit.Refusal{}).Pushback(); ok {
		t.Error("a refusal without a delay has a pushback")
	}
}

// refusal returns the *Refusal in err, or nil.
func refusal(err error) *rpclimit.Refusal {
	var r *rpclimit.Refusal
	if errors.As(err, &r) {
		return r
	}
	if err != nil {
		panic(err)
	}
	return nil
}
