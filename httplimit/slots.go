package httplimit

import (
	"net/http"
	"time"

	"github.com/keycap/keycap"
)

// DefaultRetryAfter is the Retry-After of a refusal when Slots sets none.
const DefaultRetryAfter = time.Second

// Slots is one limit on the requests in flight: a keycap.Spec, the key it
// counts against, and how a refusal is answered. Build it with Limit (or
// Max) and refine it with its methods, each of which returns a modified
// copy:
//
//	exports := keycap.Spec{Max: 3, Wait: 2 * time.Second}
//	httplimit.Limit(exports).By("team:" + teamID).RetryAfter(5 * time.Second)
//
// The spec is checked when a request is limited: an invalid one makes that
// request fail with a logged 500 that names its field. (To find it at
// start-up, give the spec its limiter's name and call Spec.Validate.)
type Slots struct {
	spec       keycap.Spec
	key        string
	keySet     bool
	retryAfter time.Duration
	retrySet   bool
	respond    ResponseFunc
}

// ResponseFunc writes the response to a refused request. err names the limit
// that refused and how long the request waited. The Retry-After header is
// already set on w when it runs (and may be changed); the handler does not
// run.
type ResponseFunc func(w http.ResponseWriter, r *http.Request, err *keycap.LimitError)

// Limit returns the limit of spec on the requests in flight per key, for
// the default key: the authenticated user, else the client's IP address.
// Its name is the limiter's (the name given to For) unless spec names one,
// so that the routes that use a limiter share its pools.
func Limit(spec keycap.Spec) Slots { return Slots{spec: spec} }

// Max returns a limit of n requests in flight per key, for the default key:
// Limit(keycap.Spec{Max: n}). n may be 0: such a limit refuses every
// request, at once.
func Max(n int) Slots { return Slots{spec: keycap.Spec{Max: n}} }

// By counts the limit against key instead of the default key. Keys may be any
// bytes; prefix them by kind ("team:42") so that different kinds never share
// a pool.
func (s Slots) By(key string) Slots { s.key, s.keySet = key, true; return s }

// RetryAfter sets the Retry-After header of a refusal, rounded up to whole
// seconds (default DefaultRetryAfter). 0 sends no header.
func (s Slots) RetryAfter(d time.Duration) Slots { s.retryAfter, s.retrySet = d, true; return s }

// Respond replaces the default 429 response of a refusal by this limit.
func (s Slots) Respond(fn ResponseFunc) Slots { s.respond = fn; return s }

// Spec returns the limit's spec.
func (s Slots) Spec() keycap.Spec { return s.spec }

func (s Slots) retry() time.Duration {
	if s.retrySet {
		return s.retryAfter
	}
	return DefaultRetryAfter
}

// Rule is what a LimitFunc returns for a request: a Slots, several of them
// (All), or nil for no limit on this request.
type Rule interface {
	slots() []Slots
}

func (s Slots) slots() []Slots { return []Slots{s} }

// All returns a rule of several limits, all of which must grant a slot. When
// one refuses, the slots already taken are released before the request is
// refused: a request never holds one slot while it waits for another.
func All(slots ...Slots) Rule { return all(slots) }

type all []Slots

func (a all) slots() []Slots { return a }
