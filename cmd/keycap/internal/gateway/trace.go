package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// traceID returns the trace ID of a request's W3C traceparent header
// (https://www.w3.org/TR/trace-context/#traceparent-header) when the trace
// is sampled — the caller's OpenTelemetry (or any W3C tracer) records it —
// else "". The gateway passes the header on to the upstream unchanged, so
// the ID is the trace the upstream's spans join: the metrics' exemplars
// (keycap_gateway_upstream_seconds, keycap_gateway_requests_total) link a
// latency or a refusal to it. Anything but a well-formed version-00 header
// with a non-zero ID is ignored.
func traceID(r *http.Request) string {
	vs := r.Header.Values("Traceparent")
	if len(vs) != 1 {
		return "" // none, or several: the specification says to ignore them
	}
	v := vs[0]
	// 00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>
	if len(v) != 55 || v[:3] != "00-" || v[35] != '-' || v[52] != '-' {
		return ""
	}
	id, parent, flags := v[3:35], v[36:52], v[53:55]
	if !lowerHex(id) || !lowerHex(parent) || !lowerHex(flags) || allZero(id) || allZero(parent) {
		return ""
	}
	if hexVal(flags[1])&1 == 0 {
		return "" // not sampled: no trace to link to
	}
	return id
}

func lowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool {
	for i := range len(s) {
		if s[i] != '0' {
			return false
		}
	}
	return true
}

func hexVal(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

// exemplar is the exemplar of a trace ID, nil without one.
func exemplar(trace string) prometheus.Labels {
	if trace == "" {
		return nil
	}
	return prometheus.Labels{"trace_id": trace}
}
