package gateway

import (
	"math"
	"net/http"
	"testing"
	"time"
)

// TestGRPCWireForms: grpc-message is percent-encoded as the gRPC spec asks,
// grpc-timeout reads and writes every unit, and only gRPC content types make
// a gRPC call, and only over HTTP/2.
func TestGRPCWireForms(t *testing.T) {
	if got := grpcPercentEncode("50% off: é\n"); got != "50%25 off: %C3%A9%0A" {
		t.Errorf("percent-encoded %q", got)
	}
	for in, want := range map[string]time.Duration{"1H": time.Hour, "2M": 2 * time.Minute, "3S": 3 * time.Second, "40m": 40 * time.Millisecond, "5u": 5 * time.Microsecond, "6n": 6, "99999999S": 99999999 * time.Second, "99999999H": math.MaxInt64} {
		r := &http.Request{Header: http.Header{"Grpc-Timeout": {in}}}
		if d, ok := grpcTimeout(r); !ok || d != want {
			t.Errorf("grpc-timeout %q: %v %v", in, d, ok)
		}
	}
	for _, bad := range []string{"", "1", "123456789S", "1x", "-1S", "S"} {
		if _, ok := grpcTimeout(&http.Request{Header: http.Header{"Grpc-Timeout": {bad}}}); ok {
			t.Errorf("grpc-timeout %q read", bad)
		}
	}
	for d, want := range map[time.Duration]string{time.Second: "1000000u", 150 * time.Millisecond: "150000u", 2 * time.Minute: "120000m", 30 * time.Hour: "108000S", 1500 * time.Nanosecond: "1500n", 0: "1n"} {
		if got := grpcTimeoutValue(d); got != want {
			t.Errorf("grpcTimeoutValue(%s) = %q, want %q", d, got, want)
		}
	}
	for ct, want := range map[string]bool{"application/grpc": true, "application/grpc+proto": true, "application/grpc;charset=utf-8": true,
		"application/grpc-web": false, "application/grpcx": false, "application/json": false, "": false} {
		if got := isGRPC(&http.Request{ProtoMajor: 2, Header: http.Header{"Content-Type": {ct}}}); got != want {
			t.Errorf("isGRPC(%q) = %v", ct, got)
		}
		// Over HTTP/1 a Content-Type is only a claim: never a gRPC call,
		// whose bounds are per message.
		if isGRPC(&http.Request{ProtoMajor: 1, Header: http.Header{"Content-Type": {ct}}}) {
			t.Errorf("isGRPC(%q) over HTTP/1", ct)
		}
	}
}
