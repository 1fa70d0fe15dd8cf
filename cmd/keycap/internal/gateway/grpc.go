package gateway

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/rpclimit"
)

// gRPC calls go through the gateway as any request does (HTTP/2 both
// ways, trailers passed on, streams unbuffered); what differs is the
// answer the gateway gives one itself — a refusal, a failure — which is a
// gRPC status that gRPC clients decode, never an HTTP error page.

// isGRPC reports whether r is a gRPC call: over HTTP/2, with a
// Content-Type of application/grpc, or application/grpc+proto,
// application/grpc;… — the test grpc-go's server makes. gRPC-Web
// (application/grpc-web), whose clients read the status from the body, is
// answered as HTTP, and so is an HTTP/1 request that only claims the type:
// gRPC runs on HTTP/2 alone, and a gRPC call is bounded per message rather
// than in total (max_body, the body timeouts), which a client must not win
// by naming a Content-Type.
func isGRPC(r *http.Request) bool {
	if r.ProtoMajor != 2 {
		return false
	}
	rest, ok := strings.CutPrefix(r.Header.Get("Content-Type"), "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// gRPC status codes (google.golang.org/grpc/codes) the gateway answers with.
const (
	grpcUnknown           = 2
	grpcInvalidArgument   = 3
	grpcDeadlineExceeded  = 4
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcUnimplemented     = 12
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnauthenticated   = 16
)

// grpcCodeOf is the gRPC status of an answer the gateway would give an HTTP
// request with status: the one table for every refusal and failure.
func grpcCodeOf(status int) int {
	switch status {
	case http.StatusBadRequest: // a path the gateway does not forward
		return grpcInvalidArgument
	case http.StatusUnauthorized: // a key missing, on_missing: refuse
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound, http.StatusMethodNotAllowed: // no such method here
		return grpcUnimplemented
	case http.StatusRequestTimeout, http.StatusGatewayTimeout: // too slow: the client, the upstream, the call's deadline
		return grpcDeadlineExceeded
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests: // a message over max_body (as grpc-go says it); a limit
		return grpcResourceExhausted
	case http.StatusInternalServerError:
		return grpcInternal
	case http.StatusBadGateway, http.StatusServiceUnavailable: // the upstream unreachable; the store down, failing closed
		return grpcUnavailable
	}
	return grpcUnknown
}

// writeError answers a request the gateway refuses or cannot serve with
// status and message: as httplimit does (JSON or text), or, to a gRPC call,
// with the gRPC status that stands for it. A 429 or 503 carries the
// Retry-After already set on w, if any, as its pushback.
func writeError(w http.ResponseWriter, r *http.Request, status int, message string) {
	if !isGRPC(r) {
		httplimit.WriteError(w, r, status, message)
		return
	}
	var retry time.Duration
	if s, err := strconv.Atoi(w.Header().Get("Retry-After")); err == nil && s > 0 {
		retry = time.Duration(s) * time.Second
	}
	writeGRPCError(w, status, message, retry)
}

// writeGRPCError answers a gRPC call with the status that stands for the
// HTTP status: a trailers-only response (HTTP 200, application/grpc,
// grpc-status, grpc-message). With retry > 0 on a retryable code
// (RESOURCE_EXHAUSTED, UNAVAILABLE) it also carries grpc-retry-pushback-ms,
// which grpc-go's retry policy obeys, and grpc-status-details-bin: a
// google.rpc.Status with a google.rpc.RetryInfo. The metrics count the
// answer under status.
func writeGRPCError(w http.ResponseWriter, status int, message string, retry time.Duration) {
	code := grpcCodeOf(status)
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(code))
	h.Set("Grpc-Message", grpcPercentEncode(message))
	if retry > 0 && (code == grpcResourceExhausted || code == grpcUnavailable) {
		// Rounded up, as rpclimit's pushback: a delay under a millisecond
		// is no invitation to come back at once.
		h.Set("Grpc-Retry-Pushback-Ms", strconv.FormatInt(int64((retry+time.Millisecond-1)/time.Millisecond), 10))
		if details := grpcRetryDetails(code, message, retry); details != "" {
			h.Set("Grpc-Status-Details-Bin", details)
		}
	}
	w.WriteHeader(http.StatusOK)
	standsFor(w, status)
}

// grpcRetryDetails is a google.rpc.Status with a RetryInfo of retry,
// encoded for grpc-status-details-bin (base64 without padding, as gRPC
// sends binary metadata).
func grpcRetryDetails(code int, message string, retry time.Duration) string {
	info, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	if err != nil {
		return ""
	}
	b, err := proto.Marshal(&spb.Status{Code: int32(code), Message: message, Details: []*anypb.Any{info}})
	if err != nil {
		return ""
	}
	return base64.RawStdEncoding.EncodeToString(b)
}

// standsFor records in w's request (its recorder) the HTTP status a gRPC
// answer stands for, so that the metrics and the page count a refused call
// as a 429, not as the 200 that carries it.
func standsFor(w http.ResponseWriter, status int) {
	for {
		if rec, ok := w.(*recorder); ok {
			rec.q.status = status
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// grpcPercentEncode encodes a grpc-message as the gRPC spec asks: bytes
// outside printable ASCII, and '%', as %XX.
func grpcPercentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// grpcWriter stands between a gRPC call's route and the limit middleware:
// the middleware's own HTTP answers (429, 503 when the store is down and the
// limit fails closed, 500) become gRPC statuses. The upstream's response
// does not go through it (routeProxy unwraps it), nor does a refusal the
// route's respond answers already in gRPC (it writes 200).
type grpcWriter struct {
	http.ResponseWriter
	retry time.Duration // a 503's pushback: the largest retry_after of the route's limits
	done  bool
}

func (w *grpcWriter) WriteHeader(status int) {
	if w.done {
		return
	}
	w.done = true
	if status == http.StatusOK {
		w.ResponseWriter.WriteHeader(status)
		return
	}
	var retry time.Duration
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		retry = w.retry
	}
	writeGRPCError(w.ResponseWriter, status, http.StatusText(status), retry)
}

// Write drops the body of an HTTP answer: a trailers-only gRPC response has
// none.
func (w *grpcWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return len(b), nil
}

func (w *grpcWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// grpcResponse is the writer of a gRPC call's upstream response. An answer
// that is trailers only (the upstream's status with no message: an error
// before any response) must reach the client as one HEADERS frame that ends
// the stream, or gRPC clients read headers without a status and then a
// stream without trailers: so such an answer is not flushed before the
// handler returns. Every other response is flushed as it comes.
type grpcResponse struct {
	http.ResponseWriter
	trailersOnly bool // set by modifyResponse, before the first flush
}

func (w *grpcResponse) Flush() {
	if !w.trailersOnly {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *grpcResponse) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type grpcResponseKey struct{}

// grpcTrailersOnly reports whether resp, the upstream's answer to a gRPC
// call, is a trailers-only response: its status in its headers, no body.
func grpcTrailersOnly(resp *http.Response) bool {
	return resp.ContentLength == 0 && resp.Header.Get("Grpc-Status") != ""
}

// reportGRPCOverload reports an upstream's gRPC status to the route's
// adaptive parents when it is an overload (rpclimit.Overload:
// RESOURCE_EXHAUSTED, UNAVAILABLE, DEADLINE_EXCEEDED), as an HTTP 429 or
// 503 is.
func reportGRPCOverload(ctx context.Context, status string) {
	if code, err := strconv.ParseUint(status, 10, 32); err == nil && rpclimit.Overload(rpclimit.Code(code)) {
		keycap.ReportOverload(ctx)
	}
}

// grpcStatusBody is the body of an upstream's gRPC answer whose status
// comes in its trailers: read when the body ends, before the proxy's
// handler returns and the call's slots are released.
type grpcStatusBody struct {
	io.ReadCloser
	resp *http.Response
	read bool
}

func (b *grpcStatusBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.read {
		b.read = true
		reportGRPCOverload(b.resp.Request.Context(), b.resp.Trailer.Get("Grpc-Status"))
	}
	return n, err
}

// errGRPCDeadline ends a gRPC call whose deadline (grpc-timeout) passed.
var errGRPCDeadline = errors.New("the call's deadline (grpc-timeout) passed")

// grpcTimeout reads a call's grpc-timeout: up to 8 digits and a unit (H, M,
// S, m, u, n).
func grpcTimeout(r *http.Request) (time.Duration, bool) {
	s := r.Header.Get("Grpc-Timeout")
	if len(s) < 2 || len(s) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > int64(math.MaxInt64/unit) { // 99999999H: beyond what a Duration holds, as good as none
		return math.MaxInt64, true
	}
	return time.Duration(n) * unit, true
}

// grpcTimeoutValue writes d as a grpc-timeout, rounded up to the finest unit
// whose value fits in 8 digits.
func grpcTimeoutValue(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}} {
		if v := (d + u.unit - 1) / u.unit; v <= 99999999 {
			return strconv.FormatInt(int64(v), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(min((d+time.Hour-1)/time.Hour, 99999999)), 10) + "H"
}

// grpcMessages bounds each message of a gRPC call's request stream, read
// from its 5-byte prefix (a flag, a 4-byte length) before the message is
// passed on: max_body is a message's bound for a gRPC call, not the
// stream's, which may run for hours.
type grpcMessages struct {
	io.ReadCloser
	max    int64
	prefix [5]byte
	n      int   // bytes of the current prefix read
	left   int64 // bytes of the current message still to come
	err    error
}

func (b *grpcMessages) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p)
	for i := 0; i < n; {
		if b.left > 0 {
			k := min(int64(n-i), b.left)
			i += int(k)
			b.left -= k
			continue
		}
		b.prefix[b.n] = p[i]
		b.n++
		i++
		if b.n == len(b.prefix) {
			b.n, b.left = 0, int64(binary.BigEndian.Uint32(b.prefix[1:]))
			if b.left > b.max {
				// The call fails: what came before in this read is of no
				// use to the upstream either.
				b.err = &http.MaxBytesError{Limit: b.max}
				return 0, b.err
			}
		}
	}
	return n, err
}
