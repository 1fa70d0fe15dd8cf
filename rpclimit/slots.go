package rpclimit

import (
	"time"

	"github.com/keycap/keycap"
)

// DefaultRetryAfter is the retry delay a refusal asks for when Slots sets
// none.
const DefaultRetryAfter = time.Second

// MaxKeyBytes bounds a key read from metadata: a longer value is a bad key
// (see Missing), so that no caller can make the process keep a huge key in
// its events, labels and inspection.
const MaxKeyBytes = 512

// Slots is one limit on the calls in flight: a keycap.Spec, the key it
// counts against, and the delay a refusal asks for. Build it with Limit (or
// Max) and refine it with its methods, each of which returns a modified
// copy:
//
//	rpclimit.Limit(keycap.Spec{Max: 3, Wait: time.Second}).ByMetadata("x-tenant")
type Slots struct {
	spec       keycap.Spec
	key        string
	keySet     bool
	metadata   string // ByMetadata: the name, lower case
	missing    Missing
	retryAfter time.Duration
	retrySet   bool
}

// Missing says what happens to a call whose key metadata (ByMetadata) is
// absent, empty or longer than MaxKeyBytes.
type Missing uint8

const (
	// RefuseMissing refuses the call with InvalidArgument, naming the
	// metadata. The default.
	RefuseMissing Missing = iota
	// DefaultKeyIfMissing counts the call against the default key (the
	// caller's identity, else its address).
	DefaultKeyIfMissing
	// SkipIfMissing lets the call through without this limit.
	SkipIfMissing
)

// Limit returns the limit of spec on the calls in flight, for the default
// key: the authenticated caller (WithIdentify), else the peer's address. Its
// name is the pattern's (the one given to For) unless spec names one.
func Limit(spec keycap.Spec) Slots { return Slots{spec: spec} }

// Max returns a limit of n calls in flight per key, for the default key:
// Limit(keycap.Spec{Max: n}). n may be 0: such a limit refuses every call.
func Max(n int) Slots { return Slots{spec: keycap.Spec{Max: n}} }

// By counts the limit against key. Keys may be any bytes; prefix them by
// kind ("team:42") so that different kinds never share a pool.
func (s Slots) By(key string) Slots {
	s.key, s.keySet, s.metadata = key, true, ""
	return s
}

// ByMetadata counts the limit against the first value of the call's
// metadata name (a gRPC metadata key, a Connect header; matched without
// regard to case). The key is "md:" + the name + ":" + the value, so that
// it never shares a pool with a key of another kind. A call without it
// follows Missing (RefuseMissing unless set).
func (s Slots) ByMetadata(name string) Slots {
	s.metadata, s.keySet, s.key = lower(name), false, ""
	return s
}

// IfMissing sets what happens to a call whose ByMetadata key is absent,
// empty or too long.
func (s Slots) IfMissing(m Missing) Slots { s.missing = m; return s }

// RetryAfter sets the delay a refusal asks the client to wait (gRPC's
// RetryInfo and grpc-retry-pushback-ms). Default DefaultRetryAfter; 0 asks
// for none.
func (s Slots) RetryAfter(d time.Duration) Slots { s.retryAfter, s.retrySet = d, true; return s }

// Spec returns the limit's spec.
func (s Slots) Spec() keycap.Spec { return s.spec }

func (s Slots) retry() time.Duration {
	if s.retrySet {
		return s.retryAfter
	}
	return DefaultRetryAfter
}

// Rule is what a LimitFunc returns for a call: a Slots, several of them
// (All), or nil for no limit on this call.
type Rule interface {
	slots() []Slots
}

func (s Slots) slots() []Slots { return []Slots{s} }

// All returns a rule of several limits, all of which must grant a slot. When
// one refuses, the slots already taken are released before the call is
// refused: a call never holds one slot while it waits for another.
func All(slots ...Slots) Rule { return all(slots) }

type all []Slots

func (a all) slots() []Slots { return a }

// lower returns s in ASCII lower case, as metadata names are compared.
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
