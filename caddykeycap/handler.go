package caddykeycap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/keycap/keycap"
	"github.com/keycap/keycap/store"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("keycap", parseCaddyfile)
	// After authentication (basic_auth, forward_auth) and request_header, so
	// that a key can read what they set; before every handler that answers
	// (handle and route blocks, respond, reverse_proxy, file_server), so
	// that their responses are served while the slots are held.
	httpcaddyfile.RegisterDirectiveOrder("keycap", httpcaddyfile.After, "request_header")
}

// Handler caps the requests in flight per key: it takes a slot of each of its
// limits — all of them or none — calls the next handler, and gives the slots
// back when that handler returns.
//
// A request over a limit gets 429 Too Many Requests, and a store failure with
// a limit that fails closed 503 Service Unavailable, both with Retry-After,
// as handler errors: Caddy's handle_errors can answer them its own way
// ({http.error.status_code}, and {http.keycap.limit} names the limit).
type Handler struct {
	// Limits are the handler's limits; a request needs a slot of each.
	Limits []LimitConfig `json:"limits,omitempty"`
	// Store says where the slots live; default: in this Caddy's memory.
	Store *StoreConfig `json:"store,omitempty"`

	limits     []limit
	adaptive   bool // a limit has an adaptive parent: overloads are reported
	limiter    *keycap.Limiter
	limiterKey string // in limiters; "" when none is held
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.keycap",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision checks the limits, then finds the Limiter of the handler's store,
// making it when no other handler of this Caddy uses the same store.
func (h *Handler) Provision(caddy.Context) error {
	limits, err := compileLimits(h.Limits)
	if err != nil {
		return err
	}
	var sc StoreConfig
	if h.Store != nil {
		sc = *h.Store
	}
	sc, err = sc.resolve()
	if err != nil {
		return err
	}
	key, sl, err := acquireLimiter(sc)
	if err != nil {
		return err
	}
	if err := needTotals(limits, sc.Type, sl.features); err != nil {
		_ = releaseLimiter(key)
		return err
	}
	h.limits, h.limiter, h.limiterKey = limits, sl.limiter, key
	h.adaptive = false
	for i := range limits {
		h.adaptive = h.adaptive || limits[i].adaptive
	}
	return nil
}

// needTotals refuses an adaptive parent on a store that cannot keep its
// total (store.Totals), which keycap would otherwise refuse at every
// request.
func needTotals(limits []limit, storeType string, f store.Features) error {
	if f.Has(store.Totals) {
		return nil
	}
	for i := range limits {
		if limits[i].adaptive {
			return fieldError(i, limits[i].spec.Name, "parent.adaptive",
				"the store (%s) cannot keep an adaptive total: it lacks %s", storeType, store.Totals)
		}
	}
	return nil
}

// Validate reports a handler that Provision did not make ready.
func (h *Handler) Validate() error {
	if h.limiter == nil || len(h.limits) == 0 {
		return errors.New("keycap: handler not provisioned")
	}
	return nil
}

// Cleanup gives the handler's Limiter back; the last handler using it closes
// it.
func (h *Handler) Cleanup() error {
	if h.limiterKey == "" {
		return nil
	}
	key := h.limiterKey
	h.limiterKey = ""
	return releaseLimiter(key)
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil { // not served by Caddy's server (a test)
		repl = caddy.NewReplacer()
	}
	var one [1]keycap.Limit
	limits := one[:0]
	if len(h.limits) > 1 {
		limits = make([]keycap.Limit, 0, len(h.limits))
	}
	for i := range h.limits {
		l := &h.limits[i]
		key := repl.ReplaceAll(l.key, "")
		if key == "" {
			if l.refuse {
				repl.Set("http.keycap.limit", l.spec.Name)
				return caddyhttp.Error(http.StatusBadRequest,
					fmt.Errorf("keycap: limit %q: key %s is empty for this request", l.spec.Name, l.key))
			}
			key = repl.ReplaceAll(DefaultKey, "")
		}
		limits = append(limits, l.spec.For(key))
	}

	if h.adaptive {
		return h.serveAdaptive(w, r, repl, limits, next)
	}
	ran := false
	err := h.limiter.Do(r.Context(), func(context.Context) error {
		ran = true
		return next.ServeHTTP(w, r)
	}, limits...)
	if err == nil || ran {
		return err // the next handler's
	}
	return h.refuse(w, r, repl, limits, err)
}

// serveAdaptive is ServeHTTP's end for a handler with an adaptive parent:
// the next handler's outcome is read for overload signals, which the
// lease reports to the parent's total.
func (h *Handler) serveAdaptive(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, limits []keycap.Limit, next caddyhttp.Handler) error {
	ran := false
	err := h.limiter.Do(r.Context(), func(ctx context.Context) error {
		ran = true
		// the status the next handler writes, passed through as it
		// comes: nothing is buffered
		rec := caddyhttp.NewResponseRecorder(w, nil, nil)
		err := next.ServeHTTP(rec, r)
		if overloaded(rec.Status(), err) {
			keycap.ReportOverload(ctx) // ctx carries the lease: its limits have an adaptive parent
		}
		return err
	}, limits...)
	if err == nil || ran {
		return err // the next handler's
	}
	return h.refuse(w, r, repl, limits, err)
}

// overloaded reports whether the next handler's outcome — the status it
// wrote, the error it returned — is an overload signal for an adaptive
// parent: 429, 503, 504 or 529 (reverse_proxy passes on the upstream's,
// and answers 504 when the upstream times out), or a timeout. The 429 and
// 503 of another keycap handler further on are its limits' refusals, not
// the backend's.
func overloaded(status int, err error) bool {
	if keycap.OverloadStatus(status) {
		return true
	}
	if err == nil {
		return false
	}
	var le *keycap.LimitError
	if errors.As(err, &le) || errors.Is(err, keycap.ErrStoreUnavailable) || errors.Is(err, keycap.ErrClosed) {
		return false
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && keycap.OverloadStatus(he.StatusCode) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// refuse answers a request that got no slot.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, limits []keycap.Limit, err error) error {
	var le *keycap.LimitError
	switch {
	case errors.As(err, &le):
		ra := DefaultRetryAfter
		for i := range limits {
			if limits[i].Pool() == le.Limit.Pool() {
				ra = h.limits[i].retryAfter
			}
		}
		setRetryAfter(w, ra)
		repl.Set("http.keycap.limit", le.Limit.Name())
		return caddyhttp.Error(http.StatusTooManyRequests, err)
	case errors.Is(err, keycap.ErrStoreUnavailable), errors.Is(err, keycap.ErrClosed):
		var ra time.Duration // the largest among the request's limits
		for i := range h.limits {
			ra = max(ra, h.limits[i].retryAfter)
		}
		setRetryAfter(w, ra)
		var se *keycap.StoreError
		if errors.As(err, &se) {
			repl.Set("http.keycap.limit", se.Limit.Name())
		}
		return caddyhttp.Error(http.StatusServiceUnavailable, err)
	case r.Context().Err() != nil:
		// The client went away while the request waited for a slot: 499,
		// as reverse_proxy says of it.
		return caddyhttp.Error(499, err)
	}
	return caddyhttp.Error(http.StatusInternalServerError, err) // a bug: Provision checked the limits
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

// parseCaddyfile makes a Handler of the keycap directive.
func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var k Handler
	err := k.UnmarshalCaddyfile(h.Dispenser)
	return &k, err
}

// Interface guards.
var (
	_ caddy.Module                = (*Handler)(nil)
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
