package rpclimit

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Code is a refusal's status code: the numbers gRPC and Connect share.
type Code uint32

// The codes a refusal has.
const (
	// Canceled: the client cancelled while the call waited for a slot.
	Canceled Code = 1
	// InvalidArgument: the call lacks the metadata its limit is keyed by
	// (RefuseMissing).
	InvalidArgument Code = 3
	// DeadlineExceeded: the call's deadline passed while it waited.
	DeadlineExceeded Code = 4
	// ResourceExhausted: over a limit.
	ResourceExhausted Code = 8
	// Internal: the limit function returned an invalid limit (the
	// application's bug, logged).
	Internal Code = 13
	// Unavailable: the store failed and a limit fails closed.
	Unavailable Code = 14
)

// Overload reports whether a handler's answer of code is an overload
// signal for an adaptive parent (keycap.Adaptive): ResourceExhausted,
// Unavailable or DeadlineExceeded, as a backend answers when it cannot take
// more. The server interceptors (grpclimit, connectlimit) report it
// (keycap.ReportOverload) from the code the handler returned.
func Overload(code Code) bool {
	return code == ResourceExhausted || code == Unavailable || code == DeadlineExceeded
}

// PushbackHeader is the trailer in which gRPC servers tell a client's retry
// policy how long to wait before its next attempt, in milliseconds
// (gRPC's A6 retry design); grpc-go obeys it.
const PushbackHeader = "grpc-retry-pushback-ms"

// Refusal says why a call was refused, and how the client is told: a front
// door turns it into its protocol's status with Code and Message, and, when
// RetryAfter is positive, a retry delay (RetryInfo) and PushbackHeader.
type Refusal struct {
	Code       Code
	Message    string
	RetryAfter time.Duration
	Err        error // what refused: a *keycap.LimitError, a store error, a *MissingKeyError, ...
}

func (r *Refusal) Error() string {
	if r.Err == nil {
		return r.Message
	}
	return r.Message + ": " + r.Err.Error()
}

// Unwrap returns what refused the call.
func (r *Refusal) Unwrap() error { return r.Err }

// Pushback returns the value of PushbackHeader for the refusal's delay, in
// whole milliseconds rounded up, and false when it asks for none.
func (r *Refusal) Pushback() (string, bool) {
	if r.RetryAfter <= 0 {
		return "", false
	}
	ms := (r.RetryAfter + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(ms), 10), true
}

// Service returns the service of a procedure: "pkg.Service" of
// "/pkg.Service/Method". Client doors name a call's API by it unless told
// otherwise.
func Service(procedure string) string {
	s := strings.TrimPrefix(procedure, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

// Throttled says how long a client should leave an API alone after a call
// to it ended with code (the rule of the client doors): a
// ResourceExhausted with a delay — the longest of its RetryInfo delays and
// its pushback, which holds one value of PushbackHeader — or an Unavailable
// with a pushback; a ResourceExhausted without either waits unhinted. It
// returns 0 for anything else: not throttled.
func Throttled(code Code, pushback []string, retryInfo []time.Duration, unhinted time.Duration) time.Duration {
	var wait time.Duration
	hinted := false
	if len(pushback) == 1 {
		if n, err := strconv.ParseInt(pushback[0], 10, 64); err == nil && n >= 0 && n < math.MaxInt64/int64(time.Millisecond) {
			wait, hinted = time.Duration(n)*time.Millisecond, true
		}
	}
	switch code {
	case ResourceExhausted:
		for _, d := range retryInfo {
			if d >= 0 {
				wait, hinted = max(wait, d), true
			}
		}
		if !hinted {
			return unhinted
		}
	case Unavailable:
	default:
		return 0
	}
	return wait
}
