package httplimit

import (
	"net/http"
	"time"

	"github.com/keycap/keycap"
)

// DefaultRetryAfter is the Retry-After of a refusal when Slots sets none.
const DefaultRetryAfter = time.Second

// Slots is one limit on the requests in flight: at most Max per key. Build it
// with Max and refine it with its methods, each of which returns a modified
// copy:
//
//	httplimit.Max(3).By("team:" + teamID).Wait(2 * time.Second).RetryAfter(5 * time.Second)
//
// Values are checked when a request is limited; an invalid one (a negative
// max, say) makes that request fail with a logged 500 that names it.
type Slots struct {
	max        int
	key        string
	wait       time.Duration
	ttl        time.Duration
	retryAfter time.Duration
	budget     time.Duration
	respond    ResponseFunc
	fail       keycap.FailMode
	keySet     bool
	ttlSet     bool
	retrySet   bool
	budgetSet  bool
	weight     int // 0: not set
	share      int // 0: not set
	min        int
	minSet     bool
	parent     *keycap.Parent
	shadow     bool
}

// ResponseFunc writes the response to a refused request. err names the limit
// that refused and how long the request waited. The Retry-After header is
// already set on w when it runs (and may be changed); the handler does not
// run.
type ResponseFunc func(w http.ResponseWriter, r *http.Request, err *keycap.LimitError)

// Max returns a limit of n requests in flight per key, for the default key:
// the authenticated user, else the client's IP address. n may be 0: such a
// limit refuses every request, at once.
func Max(n int) Slots { return Slots{max: n} }

// By counts the limit against key instead of the default key. Keys may be any
// bytes; prefix them by kind ("team:42") so that different kinds never share
// a pool.
func (s Slots) By(key string) Slots { s.key, s.keySet = key, true; return s }

// Wait lets a request wait up to d for a slot before it is refused. A waiting
// request holds no slot, but it holds its connection and goroutine: keep it
// short. Default 0.
func (s Slots) Wait(d time.Duration) Slots { s.wait = d; return s }

// TTL sets how long a slot lives if its process dies without releasing it
// (default keycap.DefaultTTL; at least keycap.MinTTL, as for keycap.WithTTL:
// 0 is invalid, not the default). A request that runs longer keeps its slot:
// it is renewed while the handler runs.
func (s Slots) TTL(d time.Duration) Slots { s.ttl, s.ttlSet = d, true; return s }

// RetryAfter sets the Retry-After header of a refusal, rounded up to whole
// seconds (default DefaultRetryAfter). 0 sends no header.
func (s Slots) RetryAfter(d time.Duration) Slots { s.retryAfter, s.retrySet = d, true; return s }

// Respond replaces the default 429 response of a refusal by this limit.
func (s Slots) Respond(fn ResponseFunc) Slots { s.respond = fn; return s }

// FailOpen runs the handler without a slot when the store fails.
func (s Slots) FailOpen() Slots { s.fail = keycap.FailOpen; return s }

// FailClosed answers 503 Service Unavailable when the store fails.
func (s Slots) FailClosed() Slots { s.fail = keycap.FailClosed; return s }

// Budget sets the limit's decision budget: how long the store may take to
// decide before it counts as failed and the fail mode applies (default: the
// Limiter's, keycap.WithDecisionBudget). Positive.
func (s Slots) Budget(d time.Duration) Slots { s.budget, s.budgetSet = d, true; return s }

// Weight makes the request take n of the key's slots instead of one: an
// export that costs 3 of Max(10), beside reads of weight 1 on the same
// limiter and key (keycap.WithWeight). Between 1 and the max.
func (s Slots) Weight(n int) Slots { s.weight = n; return s }

// Parent makes the key's slots share the total of p with every other key
// of the limiter (and any other limit that names p): a request needs room in
// its key's pool and in p; while keys wait, p's freed slots go to them by
// their fair share (keycap.Parent). The max must not exceed p's.
func (s Slots) Parent(p keycap.Parent) Slots { s.parent = &p; return s }

// Share sets the key's weight in its parent's fair share (default 1): a
// tenant of share 3 is served as three tenants of share 1
// (keycap.WithShare). Needs Parent.
func (s Slots) Share(n int) Slots { s.share = n; return s }

// Minimum makes the key served first while it holds fewer than n of its
// parent's slots (keycap.WithMinimum). Needs Parent.
func (s Slots) Minimum(n int) Slots { s.min, s.minSet = n, true; return s }

// Shadow makes the limit a shadow limit (keycap.WithShadow): every request
// is decided and reported (events, metrics and logs labelled shadow) but
// none is refused or delayed by it, so that a new cap can be watched on
// real traffic first. Beside an enforced limiter on the same route, it
// shows what a candidate cap would do.
func (s Slots) Shadow() Slots { s.shadow = true; return s }

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
