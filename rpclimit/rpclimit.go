package rpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
)

// Call is what a front door knows of a call when it decides its limits.
type Call struct {
	// Procedure is the full method: "/pkg.Service/Method".
	Procedure string
	// Stream reports whether the call is a client, server or bidirectional
	// stream.
	Stream bool
	// Peer is the address of the connection's peer, or nil. Its String
	// ("host:port") is called only when a limit counts the call by it.
	Peer net.Addr
	// Metadata returns the call's metadata (request headers) of a name,
	// matched without regard to case; nil when the door has none.
	Metadata func(name string) []string
}

// Get returns the first value of the metadata name, or "".
func (c *Call) Get(name string) string {
	if c.Metadata == nil {
		return ""
	}
	if v := c.Metadata(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// LimitFunc returns the limits of a call: a Slots, several (All), or nil for
// none. It runs on every call its pattern matches, so a limit can depend on
// the caller's plan, the tenant, the method.
type LimitFunc func(ctx context.Context, c *Call) Rule

// Identity is an authenticated caller: its kind ("user", "service",
// "apikey") and its identifier. The default key of a limit is "kind:id".
type Identity struct {
	Kind string
	ID   string
}

// Limiters holds the limits of procedures, by pattern, and decides a call's
// slots. It is safe for concurrent use.
type Limiters struct {
	limiter  *keycap.Limiter
	identify func(context.Context) (Identity, bool)
	clientIP httplimit.ClientIP
	log      *slog.Logger
	onRefuse func(ctx context.Context, c *Call, err error)

	mu    sync.Mutex            // serialises writers of rules
	rules atomic.Pointer[table] // copy on write: calls read it without a lock
}

// table maps patterns to their functions: exact procedures, services
// ("/pkg.Service/*") and every procedure ("*").
type table struct {
	exact   map[string]*entry
	service map[string]*entry // by "/pkg.Service/"
	all     *entry
}

type entry struct {
	name string // the pattern: the limits' default name
	fn   LimitFunc
}

// An Option configures Limiters; the With functions make them, and New
// checks them.
type Option struct{ apply func(*config) }

type config struct {
	identify    func(context.Context) (Identity, bool)
	identifySet bool
	clientIP    httplimit.ClientIP
	log         *slog.Logger
	logSet      bool
	onRefuse    func(ctx context.Context, c *Call, err error)
	onRefuseSet bool
}

// WithIdentify sets how the default key finds the authenticated caller: fn
// reads what the application's authentication interceptor put in the
// call's context and reports false for an anonymous call, which is counted
// by the peer's address.
func WithIdentify(fn func(context.Context) (Identity, bool)) Option {
	return Option{func(c *config) { c.identify, c.identifySet = fn, true }}
}

// WithClientIP sets how the peer's address is found for the default key of
// anonymous calls, with the trusted-proxy rule of httplimit.NewClientIP (a
// proxy's X-Forwarded-For or Forwarded metadata is read only when the
// connection comes from a trusted proxy). Default: the connection's peer.
func WithClientIP(ip httplimit.ClientIP) Option {
	return Option{func(c *config) { c.clientIP = ip }}
}

// WithLogger sets where calls that fail because of the application's own
// limit code (an invalid limit) are logged. Default slog.Default().
func WithLogger(l *slog.Logger) Option { return Option{func(c *config) { c.log, c.logSet = l, true }} }

// WithOnRefuse calls fn for every call refused — over a limit (err matches
// keycap.ErrLimitExceeded), for a store failure with a limit that fails
// closed (keycap.ErrStoreUnavailable), or for a missing key (ErrMissingKey)
// — before the refusal is returned.
func WithOnRefuse(fn func(ctx context.Context, c *Call, err error)) Option {
	return Option{func(c *config) { c.onRefuse, c.onRefuseSet = fn, true }}
}

// New returns limiters with no limits yet, which take their slots from
// limiter.
func New(limiter *keycap.Limiter, opts ...Option) (*Limiters, error) {
	if limiter == nil {
		return nil, errors.New("rpclimit: New: limiter is nil")
	}
	c := config{log: slog.Default()}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	switch {
	case c.identifySet && c.identify == nil:
		return nil, errors.New("rpclimit: WithIdentify: the function is nil")
	case c.logSet && c.log == nil:
		return nil, errors.New("rpclimit: WithLogger: the logger is nil")
	case c.onRefuseSet && c.onRefuse == nil:
		return nil, errors.New("rpclimit: WithOnRefuse: the function is nil")
	}
	ls := &Limiters{limiter: limiter, identify: c.identify, clientIP: c.clientIP, log: c.log, onRefuse: c.onRefuse}
	ls.rules.Store(&table{exact: map[string]*entry{}, service: map[string]*entry{}})
	return ls, nil
}

// Limiter returns the keycap Limiter the slots are taken from.
func (ls *Limiters) Limiter() *keycap.Limiter { return ls.limiter }

// For registers fn for the calls whose procedure matches pattern:
//
//   - "/pkg.Service/Method", one procedure;
//   - "/pkg.Service/*", every procedure of a service;
//   - "*", every procedure.
//
// A call takes the function of its most specific pattern, and only that
// one. The pattern names the limits fn returns unless their spec names
// them, so the procedures of a service pattern share its pools. Registering
// a pattern again replaces its function.
func (ls *Limiters) For(pattern string, fn LimitFunc) error {
	kind, err := parsePattern(pattern)
	if err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("rpclimit: pattern %q: function is nil", pattern)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	old := ls.rules.Load()
	t := &table{exact: clone(old.exact), service: clone(old.service), all: old.all}
	e := &entry{name: pattern, fn: fn}
	switch kind {
	case patternAll:
		t.all = e
	case patternService:
		t.service[strings.TrimSuffix(pattern, "*")] = e
	default:
		t.exact[pattern] = e
	}
	ls.rules.Store(t)
	return nil
}

// Set registers a rule that does not depend on the call: For(pattern, a
// function returning rule).
func (ls *Limiters) Set(pattern string, rule Rule) error {
	return ls.For(pattern, func(context.Context, *Call) Rule { return rule })
}

func clone(m map[string]*entry) map[string]*entry {
	c := make(map[string]*entry, len(m)+1)
	for k, v := range m {
		c[k] = v
	}
	return c
}

type patternKind uint8

const (
	patternExact patternKind = iota
	patternService
	patternAll
)

func parsePattern(p string) (patternKind, error) {
	if p == "*" {
		return patternAll, nil
	}
	svc, method, ok := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	switch {
	case !strings.HasPrefix(p, "/") || !ok || svc == "" || method == "" || strings.Contains(method, "/"):
		return 0, fmt.Errorf(`rpclimit: invalid pattern %q: want "/pkg.Service/Method", "/pkg.Service/*" or "*"`, p)
	case method == "*":
		return patternService, nil
	case strings.Contains(method, "*") || strings.Contains(svc, "*"):
		return 0, fmt.Errorf(`rpclimit: invalid pattern %q: "*" stands only for a whole method, or alone`, p)
	}
	return patternExact, nil
}

// match returns the entry of the most specific pattern matching procedure.
func (t *table) match(procedure string) *entry {
	if e, ok := t.exact[procedure]; ok {
		return e
	}
	if i := strings.LastIndexByte(procedure, '/'); i > 0 {
		if e, ok := t.service[procedure[:i+1]]; ok {
			return e
		}
	}
	return t.all
}

// DefaultKey returns the key a limit counts against when it sets none: the
// identity's "kind:id" when WithIdentify finds one, else "ip:" and the
// peer's address (through trusted proxies, WithClientIP).
func (ls *Limiters) DefaultKey(ctx context.Context, c *Call) string {
	if ls.identify != nil {
		if id, ok := ls.identify(ctx); ok {
			return id.Kind + ":" + id.ID
		}
	}
	values := c.Metadata
	if values == nil {
		values = func(string) []string { return nil }
	}
	peer := ""
	if c.Peer != nil {
		peer = c.Peer.String()
	}
	return ls.clientIP.KeyFrom(peer, values)
}

// Run runs fn while the call holds a slot of each of its limits, and
// releases them when fn returns or panics. A call no pattern matches, or
// whose function returns nil, runs without a slot. When the call is
// refused, fn does not run and Run returns a *Refusal that says why (a
// door tells its client with it); otherwise it returns nil.
//
// fn should return when ctx ends (the client cancelled, the deadline
// passed, the connection died): the slot is released when fn returns, never
// while it still runs, so that no more calls run than the limit allows.
func (ls *Limiters) Run(ctx context.Context, c *Call, fn func(context.Context)) error {
	e := ls.rules.Load().match(c.Procedure)
	if e == nil {
		fn(ctx)
		return nil
	}
	var one [1]Slots
	var slots []Slots
	switch rl := e.fn(ctx, c).(type) {
	case nil:
	case Slots:
		one[0] = rl
		slots = one[:]
	default:
		slots = rl.slots()
	}
	var oneLimit [1]keycap.Limit
	limits, slots, ref := ls.limits(ctx, e.name, c, slots, oneLimit[:0])
	if ref != nil {
		return ls.refused(ctx, c, ref)
	}
	if len(limits) == 0 {
		fn(ctx)
		return nil
	}
	err := ls.limiter.Do(ctx, func(ctx context.Context) error {
		fn(ctx)
		return nil
	}, limits...)
	if err == nil {
		return nil
	}
	return ls.refused(ctx, c, ls.refusal(ctx, e.name, c, slots, limits, err))
}

// limits appends to limits the keycap limits of slots for call c, named
// name unless their spec names them; slots without a key that may be
// skipped are left out of both.
func (ls *Limiters) limits(ctx context.Context, name string, c *Call, slots []Slots, limits []keycap.Limit) ([]keycap.Limit, []Slots, *Refusal) {
	if len(slots) == 0 {
		return nil, nil, nil
	}
	kept, copied := slots, false // slots may be the rule's own: copied before one is left out
	defaultKey := ""
	for i, s := range slots {
		if s.retrySet && s.retryAfter < 0 {
			return nil, nil, ls.invalid(ctx, name, c, &keycap.InvalidLimitError{Field: "RetryAfter", Value: s.retryAfter.String(), Reason: "must be at least 0"})
		}
		key, haveKey := s.key, s.keySet
		if s.metadata != "" {
			v := c.Get(s.metadata)
			switch {
			case v != "" && len(v) <= MaxKeyBytes:
				key, haveKey = "md:"+s.metadata+":"+v, true
			case s.missing == SkipIfMissing:
				if !copied {
					kept, copied = append([]Slots(nil), slots[:i]...), true
				}
				continue
			case s.missing == RefuseMissing:
				why := "missing"
				if v != "" {
					why = fmt.Sprintf("longer than %d bytes", MaxKeyBytes)
				}
				return nil, nil, &Refusal{Code: InvalidArgument,
					Message: fmt.Sprintf("metadata %q %s: the call's limit needs it", s.metadata, why),
					Err:     &MissingKeyError{Metadata: s.metadata, TooLong: v != ""}}
			}
		}
		if !haveKey {
			if defaultKey == "" {
				defaultKey = ls.DefaultKey(ctx, c)
			}
			key = defaultKey
		}
		spec := s.spec
		if spec.Name == "" {
			spec.Name = name
		}
		limits = append(limits, spec.For(key)) // an invalid spec: Do returns its error
		if copied {
			kept = append(kept, s)
		}
	}
	return limits, kept, nil
}

// refusal turns Do's error into the refusal a client is told.
func (ls *Limiters) refusal(ctx context.Context, name string, c *Call, slots []Slots, limits []keycap.Limit, err error) *Refusal {
	var le *keycap.LimitError
	switch {
	case errors.As(err, &le):
		s := slots[0]
		for i := range limits {
			if limits[i].Pool() == le.Limit.Pool() {
				s = slots[i]
			}
		}
		return &Refusal{Code: ResourceExhausted, Message: "too many calls in flight", RetryAfter: s.retry(), Err: err}
	case errors.Is(err, keycap.ErrStoreUnavailable), errors.Is(err, keycap.ErrClosed):
		var ra time.Duration
		for _, s := range slots {
			ra = max(ra, s.retry())
		}
		return &Refusal{Code: Unavailable, Message: "limit store unavailable", RetryAfter: ra, Err: err}
	case ctx.Err() != nil:
		code := Canceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = DeadlineExceeded
		}
		return &Refusal{Code: code, Message: "ended while waiting for a slot: " + ctx.Err().Error(), Err: err}
	default:
		return ls.invalid(ctx, name, c, err)
	}
}

// invalid is the refusal of a call whose limit function returned an
// invalid limit: the application's bug, logged.
func (ls *Limiters) invalid(ctx context.Context, name string, c *Call, err error) *Refusal {
	ls.log.ErrorContext(ctx, "rpclimit: limit function returned an invalid limit",
		slog.String("pattern", name), slog.String("procedure", c.Procedure), slog.Any("error", err))
	return &Refusal{Code: Internal, Message: "invalid limit", Err: err}
}

func (ls *Limiters) refused(ctx context.Context, c *Call, r *Refusal) *Refusal {
	if ls.onRefuse != nil && (r.Code == ResourceExhausted || r.Code == Unavailable || r.Code == InvalidArgument) {
		ls.onRefuse(ctx, c, r.Err)
	}
	return r
}

// ErrMissingKey matches a *MissingKeyError.
var ErrMissingKey = errors.New("rpclimit: missing key")

// MissingKeyError refuses a call without the metadata its limit is keyed by
// (ByMetadata with RefuseMissing).
type MissingKeyError struct {
	Metadata string
	TooLong  bool // present but longer than MaxKeyBytes
}

func (e *MissingKeyError) Error() string {
	if e.TooLong {
		return fmt.Sprintf("rpclimit: metadata %q is longer than %d bytes", e.Metadata, MaxKeyBytes)
	}
	return fmt.Sprintf("rpclimit: metadata %q is missing", e.Metadata)
}

// Is makes errors.Is(err, ErrMissingKey) true.
func (e *MissingKeyError) Is(target error) bool { return target == ErrMissingKey }
