package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap"
)

// LimitFunc returns the limits of a request: a Slots, several (All), or nil
// for none. It runs on every request the middleware sees, so build the Slots
// inside it.
type LimitFunc func(r *http.Request) Rule

// Identity is an authenticated caller: its kind ("user", "admin", "apikey")
// and its identifier. The default key of a limit is "kind:id", so two kinds of
// caller with the same id never share a pool.
type Identity struct {
	Kind string
	ID   string
}

// Limiters holds named limiters and makes middleware from them. It is safe
// for concurrent use.
type Limiters struct {
	limiter  *keycap.Limiter
	identify func(*http.Request) (Identity, bool)
	clientIP ClientIP
	log      *slog.Logger
	onRefuse func(r *http.Request, limiter string, err error)

	mu    sync.Mutex                           // serialises writers of funcs
	funcs atomic.Pointer[map[string]LimitFunc] // copy on write: requests read it without a lock
}

// An Option configures Limiters; the With functions make them, and New
// checks them.
type Option struct{ apply func(*config) }

type config struct {
	identify    func(*http.Request) (Identity, bool)
	identifySet bool
	clientIP    ClientIP
	log         *slog.Logger
	logSet      bool
	onRefuse    func(r *http.Request, limiter string, err error)
	onRefuseSet bool
}

// WithIdentify sets how the default key finds the authenticated caller: fn
// reads whatever the application's authentication middleware put in the
// request (its context, usually) and reports false for a guest. Guests are
// counted by client IP.
func WithIdentify(fn func(*http.Request) (Identity, bool)) Option {
	return Option{func(c *config) { c.identify, c.identifySet = fn, true }}
}

// WithClientIP sets how the client's IP address is found for guests' default
// key (see NewClientIP). Default: the connection's remote address, proxy
// headers ignored.
func WithClientIP(ip ClientIP) Option { return Option{func(c *config) { c.clientIP = ip }} }

// WithLogger sets where requests that fail because of the application's own
// limiter code (an invalid limit) are logged. Default slog.Default().
func WithLogger(l *slog.Logger) Option { return Option{func(c *config) { c.log, c.logSet = l, true }} }

// WithOnRefuse calls fn for every request the middleware refuses — over a
// limit (err matches keycap.ErrLimitExceeded) or for a store failure with a
// limit that fails closed (keycap.ErrStoreUnavailable) — before the refusal
// is written, with the limiter's name: a place to log the refusal with the
// request's own details (its ID, its route).
func WithOnRefuse(fn func(r *http.Request, limiter string, err error)) Option {
	return Option{func(c *config) { c.onRefuse, c.onRefuseSet = fn, true }}
}

// New returns an empty set of named limiters that take their slots from
// limiter.
func New(limiter *keycap.Limiter, opts ...Option) (*Limiters, error) {
	if limiter == nil {
		return nil, errors.New("httplimit: New: limiter is nil")
	}
	c := config{log: slog.Default()}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	switch {
	case c.identifySet && c.identify == nil:
		return nil, errors.New("httplimit: WithIdentify: the function is nil")
	case c.logSet && c.log == nil:
		return nil, errors.New("httplimit: WithLogger: the logger is nil")
	case c.onRefuseSet && c.onRefuse == nil:
		return nil, errors.New("httplimit: WithOnRefuse: the function is nil")
	}
	ls := &Limiters{limiter: limiter, identify: c.identify, clientIP: c.clientIP, log: c.log, onRefuse: c.onRefuse}
	ls.funcs.Store(&map[string]LimitFunc{})
	return ls, nil
}

func checkName(name string) error {
	if name == "" {
		return errors.New("httplimit: limiter name is empty")
	}
	return nil
}

// For registers fn as the limiter name. Registering a name again replaces its
// function, for the routes already built too: a test can make a route refuse
// every request with
//
//	limiters.For("exports", func(*http.Request) httplimit.Rule { return httplimit.Max(0) })
//
// Routes that use the same name share its pools.
func (ls *Limiters) For(name string, fn LimitFunc) error {
	if err := checkName(name); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("httplimit: limiter %q: function is nil", name)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	old := *ls.funcs.Load()
	m := make(map[string]LimitFunc, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = fn
	ls.funcs.Store(&m)
	return nil
}

func (ls *Limiters) lookup(name string) LimitFunc { return (*ls.funcs.Load())[name] }

// Middleware returns the middleware of the limiter name, which must be
// registered already.
func (ls *Limiters) Middleware(name string) (func(http.Handler) http.Handler, error) {
	if ls.lookup(name) == nil {
		if err := checkName(name); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("httplimit: no limiter named %q (register it with For first)", name)
	}
	return func(next http.Handler) http.Handler {
		return &handler{ls: ls, name: name, next: next}
	}, nil
}

// Must is like Middleware but panics when name is not registered, for route
// definitions at start-up.
func (ls *Limiters) Must(name string) func(http.Handler) http.Handler {
	mw, err := ls.Middleware(name)
	if err != nil {
		panic(err)
	}
	return mw
}

// Inline returns middleware that limits to max requests in flight per default
// key, in the pool named pool ("default" when empty), for routes that need no
// function. A limiter registered under the same name, counting the same key,
// shares its slots.
func (ls *Limiters) Inline(max int, pool string) (func(http.Handler) http.Handler, error) {
	if pool == "" {
		pool = "default"
	}
	if err := checkName(pool); err != nil {
		return nil, err
	}
	rule := Max(max)
	if err := (keycap.Spec{Name: pool, Max: max}).Validate(); err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return &handler{ls: ls, name: pool, next: next, inline: &rule}
	}, nil
}

// DefaultKey returns the key a limit counts against when it sets none: the
// identity's "kind:id" when WithIdentify finds one, else "ip:" and the client's
// address.
func (ls *Limiters) DefaultKey(r *http.Request) string {
	if ls.identify != nil {
		if id, ok := ls.identify(r); ok {
			return id.Kind + ":" + id.ID
		}
	}
	return ls.clientIP.Key(r)
}

type handler struct {
	ls     *Limiters
	name   string
	next   http.Handler
	inline *Slots // the rule of an Inline route; nil: look up name
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var rule Rule
	if h.inline != nil {
		rule = *h.inline
	} else {
		rule = h.ls.lookup(h.name)(r)
	}
	var one [1]Slots
	var slots []Slots
	switch rl := rule.(type) {
	case nil:
	case Slots:
		one[0] = rl
		slots = one[:]
	default:
		slots = rl.slots()
	}
	if len(slots) == 0 {
		h.next.ServeHTTP(w, r)
		return
	}

	var oneLimit [1]keycap.Limit
	limits := oneLimit[:0]
	if len(slots) > 1 {
		limits = make([]keycap.Limit, 0, len(slots))
	}
	defaultKey := ""
	for _, s := range slots {
		key := s.key
		if !s.keySet {
			if defaultKey == "" {
				defaultKey = h.ls.DefaultKey(r)
			}
			key = defaultKey
		}
		lim, err := newLimit(h.name, key, s)
		if err != nil {
			h.ls.internalError(w, r, h.name, err)
			return
		}
		limits = append(limits, lim)
	}

	// Do releases the slots after the handler returns or panics, and reuses
	// the lease: the handler never sees it. Its only error is Acquire's.
	if err := h.ls.limiter.Do(r.Context(), func(ctx context.Context) error {
		if ctx != r.Context() { // it carries the lease (keycap.FencesFrom, keycap.ReportOverload)
			r = r.WithContext(ctx)
		}
		h.next.ServeHTTP(w, r)
		return nil
	}, limits...); err != nil {
		h.refuse(w, r, slots, limits, err)
	}
}

// newLimit builds the keycap limit of s, named name unless its spec names
// one.
func newLimit(name, key string, s Slots) (keycap.Limit, error) {
	if s.retrySet && s.retryAfter < 0 {
		return keycap.Limit{}, &keycap.InvalidLimitError{Field: "RetryAfter", Value: s.retryAfter.String(), Reason: "must be at least 0"}
	}
	spec := s.spec
	if spec.Name == "" {
		spec.Name = name
	}
	return spec.For(key), nil // an invalid spec: Do returns its error, a 500

}

func (h *handler) refuse(w http.ResponseWriter, r *http.Request, slots []Slots, limits []keycap.Limit, err error) {
	var le *keycap.LimitError
	if h.ls.onRefuse != nil && r.Context().Err() == nil &&
		(errors.Is(err, keycap.ErrLimitExceeded) || errors.Is(err, keycap.ErrStoreUnavailable) || errors.Is(err, keycap.ErrClosed)) {
		h.ls.onRefuse(r, h.name, err)
	}
	switch {
	case errors.As(err, &le):
		s := slots[0]
		for i := range limits {
			if limits[i].Pool() == le.Limit.Pool() {
				s = slots[i]
			}
		}
		setRetryAfter(w, s.retry())
		if s.respond != nil {
			s.respond(w, r, le)
			return
		}
		WriteError(w, r, http.StatusTooManyRequests, "Too Many Concurrent Requests")
	case errors.Is(err, keycap.ErrStoreUnavailable), errors.Is(err, keycap.ErrClosed):
		// The largest Retry-After among the request's limits.
		var ra time.Duration
		for _, s := range slots {
			ra = max(ra, s.retry())
		}
		setRetryAfter(w, ra)
		WriteError(w, r, http.StatusServiceUnavailable, "Service Unavailable")
	case r.Context().Err() != nil:
		// The client went away (or the server is shutting down) while the
		// request waited: nobody is left to answer.
	default:
		h.ls.internalError(w, r, h.name, err)
	}
}

func (ls *Limiters) internalError(w http.ResponseWriter, r *http.Request, name string, err error) {
	ls.log.ErrorContext(r.Context(), "httplimit: limiter returned an invalid limit",
		slog.String("limiter", name), slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.Any("error", err))
	WriteError(w, r, http.StatusInternalServerError, "Internal Server Error")
}

// setRetryAfter sets Retry-After to d in whole seconds, rounded up; 0 sends
// none.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	if d <= 0 {
		return
	}
	secs := int64((d + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
}

// WriteError answers with status and message the way the middleware answers
// a refusal: as JSON ({"message":"…"}) for clients that accept JSON, as plain
// text otherwise, never cached. A ResponseFunc can use it for its own status
// or message.
func WriteError(w http.ResponseWriter, r *http.Request, status int, message string) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if wantsJSON(r) {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"message":` + strconv.Quote(message) + "}\n"))
		return
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(message + "\n"))
}

// wantsJSON reports whether the request's Accept header names a JSON media
// type (application/json, or any type with a +json suffix).
func wantsJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			mt = strings.ToLower(strings.TrimSpace(mt))
			if mt == "application/json" || strings.HasSuffix(mt, "+json") {
				return true
			}
		}
	}
	return false
}
