package caddykeycap

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/keycap/keycap"
)

// DefaultKey is the key template of a limit that sets none: the client's
// address, as Caddy finds it (the server's trusted_proxies and
// client_ip_headers apply).
const DefaultKey = "{http.vars.client_ip}"

// DefaultRetryAfter is the Retry-After of a limit that sets none.
const DefaultRetryAfter = time.Second

// What a limit does with a request whose key template expands to nothing
// (LimitConfig.EmptyKey).
const (
	// EmptyKeyClientIP counts the request against the client's address, as
	// DefaultKey expands, in the limit's pools.
	EmptyKeyClientIP = "client_ip"
	// EmptyKeyRefuse refuses the request with 400 Bad Request.
	EmptyKeyRefuse = "refuse"
)

// LimitConfig is one limit of the handler: at most Max requests in flight at
// once per key. It becomes a keycap.Spec, which checks its fields.
type LimitConfig struct {
	// Name names the limit's pools. Limits of the same name (on the same
	// store) share them, whichever handler, site or Caddy they are on.
	// Required.
	Name string `json:"name,omitempty"`
	// Key is a placeholder template, such as {http.request.header.X-User},
	// {http.auth.user.id} or {http.request.remote.host}, expanded for each
	// request: requests with the same key share the limit's slots.
	// Default: DefaultKey, the client's address.
	Key string `json:"key,omitempty"`
	// EmptyKey says what happens to a request whose key expands to the
	// empty string: EmptyKeyClientIP (the default) or EmptyKeyRefuse.
	EmptyKey string `json:"empty_key,omitempty"`
	// Max is how many requests of a key may be in flight at once. Required;
	// 0 refuses every request.
	Max *int `json:"max,omitempty"`
	// Wait is how long a request may wait for a slot before it is refused;
	// 0 (the default) refuses at once.
	Wait caddy.Duration `json:"wait,omitempty"`
	// TTL is how long a slot outlives a Caddy that stopped renewing it (it
	// crashed); slots are renewed while requests run. Default 30s.
	TTL caddy.Duration `json:"ttl,omitempty"`
	// Weight is how many slots each request takes. Default 1.
	Weight int `json:"weight,omitempty"`
	// Parent is a total shared by every key of the limit (and of any limit
	// naming the same parent).
	Parent *ParentConfig `json:"parent,omitempty"`
	// Share is the key's weight in the parent's fair share. Default 1;
	// needs Parent.
	Share int `json:"share,omitempty"`
	// Minimum: a key holding fewer slots of the parent is served first.
	// Needs Parent.
	Minimum int `json:"minimum,omitempty"`
	// FailMode is what happens when the store cannot answer: "open" (the
	// default: the request runs without a slot) or "closed" (503).
	FailMode string `json:"fail_mode,omitempty"`
	// Shadow makes the limit decide and report but never refuse, to watch
	// a new cap on real traffic.
	Shadow bool `json:"shadow,omitempty"`
	// RetryAfter is the Retry-After of a refusal by this limit, rounded up
	// to whole seconds; nil: DefaultRetryAfter; 0 sends none.
	RetryAfter *caddy.Duration `json:"retry_after,omitempty"`
}

// ParentConfig names a parent total: at most Max slots in all for the keys
// of every limit that names it.
type ParentConfig struct {
	Name string `json:"name,omitempty"`
	Max  int    `json:"max,omitempty"`
	// Adaptive makes the total follow what the backend can take, between
	// a floor and a ceiling, starting from Max (keycap.Adaptive).
	Adaptive *AdaptiveConfig `json:"adaptive,omitempty"`
}

// AdaptiveConfig makes a parent's total adaptive (keycap.Adaptive): once
// per Interval it moves between Floor and Ceiling from the latency of the
// requests that end and from their overload signals — a response or a
// handler error of 429, 503, 504 or 529, a timeout. Every Caddy on the
// store agrees on one total. Limits of other handlers that name the same
// parent must give it the same max and adaptive settings.
type AdaptiveConfig struct {
	// Floor and Ceiling bound the total: 1 ≤ Floor ≤ the parent's max ≤
	// Ceiling. Required.
	Floor   int `json:"floor,omitempty"`
	Ceiling int `json:"ceiling,omitempty"`
	// Interval is how often the total may move: at least 10ms; default
	// keycap.DefaultInterval (250ms).
	Interval caddy.Duration `json:"interval,omitempty"`
	// Tolerance is the mean latency, as a multiple of the no-load
	// latency, past which the backend counts as queueing: above 1; default
	// keycap.DefaultTolerance (1.25).
	Tolerance float64 `json:"tolerance,omitempty"`
	// OverloadsOnly moves the total on overload signals alone, never on
	// latency (Tolerance is not read).
	OverloadsOnly bool `json:"overloads_only,omitempty"`
	// Shadow computes the total and logs it, but enforces the parent's
	// max.
	Shadow bool `json:"shadow,omitempty"`
}

// adaptive returns the keycap.Adaptive of a.
func (a *AdaptiveConfig) adaptive() keycap.Adaptive {
	return keycap.Adaptive{Floor: a.Floor, Ceiling: a.Ceiling, Interval: time.Duration(a.Interval),
		Tolerance: a.Tolerance, OverloadsOnly: a.OverloadsOnly, Shadow: a.Shadow}
}

// limit is a LimitConfig made ready for requests.
type limit struct {
	spec       keycap.Spec
	key        string // the template
	refuse     bool   // an empty key is refused (EmptyKeyRefuse)
	adaptive   bool   // its parent's total is adaptive: the handler reports overloads
	retryAfter time.Duration
}

// fieldError names the field of the i-th limit that is wrong.
func fieldError(i int, name, field, format string, args ...any) error {
	who := fmt.Sprintf("limits[%d]", i)
	if name != "" {
		who = fmt.Sprintf("limit %q", name)
	}
	return fmt.Errorf("keycap: %s: %s: %s", who, field, fmt.Sprintf(format, args...))
}

// compileLimits checks the limits and builds their specs; each error names
// the limit and its field as the configuration spells it.
func compileLimits(cfgs []LimitConfig) ([]limit, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("keycap: limits: at least one limit is required")
	}
	seen := make(map[string]bool, len(cfgs))
	parents := make(map[parentUse]string) // → the limit that names it
	out := make([]limit, 0, len(cfgs))
	var errs []error
	for i, c := range cfgs {
		l, err := compileLimit(i, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[c.Name] {
			errs = append(errs, fieldError(i, c.Name, "name", "used by another limit of the handler"))
			continue
		}
		seen[c.Name] = true
		if p := l.spec.Parent; p != nil {
			// keycap refuses two limits of one parent in one Acquire
			// (shadows apart: theirs is a parent of its own)
			u := parentUse{p.Name(), l.spec.Shadow}
			if other, ok := parents[u]; ok {
				errs = append(errs, fieldError(i, c.Name, "parent.name",
					"%q is also the parent of limit %q of this handler: a request takes a slot of each limit of its handler, and of a parent one at most", p.Name(), other))
				continue
			}
			parents[u] = c.Name
		}
		out = append(out, l)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// parentUse is a parent as a handler's limits take it: enforced or in
// shadow.
type parentUse struct {
	name   string
	shadow bool
}

func compileLimit(i int, c LimitConfig) (limit, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fieldError(i, c.Name, field, format, args...))
	}
	if c.Name == "" {
		bad("name", "required")
	}
	if c.Max == nil {
		bad("max", "required")
	}
	l := limit{key: c.Key, retryAfter: DefaultRetryAfter}
	if l.key == "" {
		l.key = DefaultKey
	}
	switch c.EmptyKey {
	case "", EmptyKeyClientIP:
	case EmptyKeyRefuse:
		l.refuse = true
	default:
		bad("empty_key", "%q: must be %s or %s", c.EmptyKey, EmptyKeyClientIP, EmptyKeyRefuse)
	}
	var mode keycap.FailMode
	switch c.FailMode {
	case "open", "closed", "":
		_ = mode.UnmarshalText([]byte(c.FailMode))
	default:
		bad("fail_mode", "%q: must be open or closed", c.FailMode)
	}
	if c.RetryAfter != nil {
		l.retryAfter = time.Duration(*c.RetryAfter)
		if l.retryAfter < 0 {
			bad("retry_after", "%s: must be at least 0", l.retryAfter)
		}
	}
	spec := keycap.Spec{
		Name:     c.Name,
		TTL:      time.Duration(c.TTL),
		Wait:     time.Duration(c.Wait),
		FailMode: mode,
		Shadow:   c.Shadow,
		Weight:   c.Weight,
		Share:    c.Share,
		Minimum:  c.Minimum,
	}
	if c.Max != nil {
		spec.Max = *c.Max
	}
	if c.Parent != nil {
		var opts []keycap.ParentOption
		missing := false
		if a := c.Parent.Adaptive; a != nil {
			// what keycap would refuse as 0, said as what it is: missing
			if a.Floor == 0 {
				bad("parent.adaptive.floor", "required, at least 1: the fewest slots the total may go down to")
			}
			if a.Ceiling == 0 {
				bad("parent.adaptive.ceiling", "required, at least the floor: the most slots the total may go up to")
			}
			missing = a.Floor == 0 || a.Ceiling == 0
			opts = append(opts, keycap.WithAdaptive(a.adaptive()))
		}
		var inv *keycap.InvalidLimitError
		switch p, err := keycap.NewParent(c.Parent.Name, c.Parent.Max, opts...); {
		case err != nil && missing && errors.As(err, &inv) && strings.HasPrefix(inv.Field, "parent adaptive "):
			// of the floor and ceiling said missing above
		case err != nil:
			errs = append(errs, specErrors(i, c.Name, err)...)
		default:
			spec.Parent = p
			// keycap counts a shadow's parent at its max: the total is
			// tuned by the enforced limits' work
			l.adaptive = c.Parent.Adaptive != nil && !c.Shadow
		}
	}
	if c.Name != "" && c.Max != nil {
		if err := spec.Validate(); err != nil {
			errs = append(errs, specErrors(i, c.Name, err)...)
		}
	}
	if len(errs) > 0 {
		return limit{}, errors.Join(errs...)
	}
	l.spec = spec
	return l, nil
}

// specErrors turns keycap's errors, which name a Spec's Go fields, into
// errors naming the configuration's.
func specErrors(i int, name string, err error) []error {
	var out []error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var ie *keycap.InvalidLimitError
		if errors.As(err, &ie) {
			out = append(out, fieldError(i, name, configField(ie.Field), "%s: %s", ie.Value, ie.Reason))
			return
		}
		out = append(out, fieldError(i, name, "limit", "%v", err))
	}
	walk(err)
	return out
}

// configField returns the configuration's name of a keycap.Spec field (or of
// a setting keycap names in words).
func configField(goName string) string {
	switch goName {
	case "TTL":
		return "ttl"
	case "FailMode":
		return "fail_mode"
	}
	if f, ok := strings.CutPrefix(goName, "parent "); ok { // NewParent's: "parent max", "parent adaptive floor"
		return "parent." + strings.ReplaceAll(f, " ", ".")
	}
	return strings.ReplaceAll(strings.ToLower(goName), " ", "_")
}
