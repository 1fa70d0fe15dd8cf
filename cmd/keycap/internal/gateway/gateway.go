// Package gateway is the keycap sidecar: a reverse proxy that applies
// keycap's caps to HTTP requests (requests in flight per key) and to
// Pusher-protocol WebSockets (connections per user), in front of an
// application in any language. cmd/keycap runs it; docs/gateway.md is the
// configuration reference.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/nullstore"
	"github.com/keycap/keycap/pushercap"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// backend is what a configuration's store section builds, kept across
// reloads that leave that section unchanged.
type backend struct {
	cfg      StoreConfig
	store    keycap.Store
	handover *handover             // while the previous backend's requests last
	client   redis.UniversalClient // nil for memory
	limiter  *keycap.Limiter
	caps     *conncap.Cap // nil without a pusher section
	capsCfg  capsConfig

	// inflight counts the requests and WebSockets served on this backend,
	// whichever configuration they started on; closed is closed by close.
	inflight  sync.WaitGroup
	closeOnce sync.Once
	closed    chan struct{}
}

type capsConfig struct {
	heartbeat, ttl time.Duration
	failOpen       bool
	defaultCap     int
	appCaps        map[string]int
}

func (b *backend) close() {
	b.closeOnce.Do(func() {
		if b.caps != nil {
			_ = b.caps.Close()
		}
		_ = b.limiter.Close()
		if b.client != nil {
			_ = b.client.Close()
		}
		close(b.closed)
	})
}

func newStore(c StoreConfig) (keycap.Store, redis.UniversalClient, error) {
	var client redis.UniversalClient
	switch c.Type {
	case "memory":
		return memstore.New(), nil, nil
	case "none":
		return nullstore.New(), nil, nil // limits off: every slot granted, events still sent
	case "redis":
		opt, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, nil, fmt.Errorf("store.url: %w", err)
		}
		if c.Username != "" {
			opt.Username = c.Username
		}
		if c.Password != "" {
			opt.Password = c.Password
		}
		opt.ContextTimeoutEnabled = true
		client = redis.NewClient(opt)
	case "sentinel":
		opt := &redis.FailoverOptions{MasterName: c.Master, SentinelAddrs: c.Addrs, Username: c.Username, Password: c.Password, ContextTimeoutEnabled: true}
		if c.TLS {
			opt.TLSConfig = tlsConfig()
		}
		client = redis.NewFailoverClient(opt)
	case "cluster":
		opt := &redis.ClusterOptions{Addrs: c.Addrs, Username: c.Username, Password: c.Password, ContextTimeoutEnabled: true}
		if c.TLS {
			opt.TLSConfig = tlsConfig()
		}
		client = redis.NewClusterClient(opt)
	default:
		return nil, nil, fmt.Errorf("store.type: unknown %q", c.Type)
	}
	s, err := redisstore.New(client, redisstore.WithPrefix(c.Prefix))
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return s, client, nil
}

// router is one configuration made into handlers; a reload builds a new one
// and swaps it in whole.
type router struct {
	cfg      *Config
	backend  *backend
	cip      httplimit.ClientIP
	mux      *http.ServeMux          // finds a request's pattern...
	handlers map[string]http.Handler // ...and this its handler
	catchAll http.Handler            // nil when a route takes "/"
	gate     *pushercap.Gate
	ws       *wsProxy                  // nil without a pusher section
	parents  map[string]*keycap.Parent // by the name in the file
}

// build makes a router from cfg, reusing old's backend when the store (and
// the connection caps' timing) did not change.
func (g *Gateway) build(cfg *Config, old *router) (*router, error) {
	be, err := g.backendFor(cfg, old)
	if err != nil {
		return nil, err
	}
	rt := &router{cfg: cfg, backend: be}
	if err := rt.routes(g); err != nil {
		if old == nil || old.backend != be {
			be.close()
		}
		return nil, err
	}
	g.history.configure(historyKeys(cfg.AdminAPI))
	return rt, nil
}

// historyKeys is the keys per limit the page's history keeps, -1 for none:
// it runs while the admin API is on.
func historyKeys(c AdminAPIConfig) int {
	switch {
	case c.Token == "":
		return -1
	case c.HistoryKeys == nil:
		return DefaultHistoryKeys
	}
	return *c.HistoryKeys
}

func capsSettings(cfg *Config) capsConfig {
	pc := cfg.Pusher
	cc := capsConfig{heartbeat: keycap.DefaultHeartbeat, ttl: conncap.DefaultTTL, defaultCap: conncap.DefaultCap, appCaps: map[string]int{}}
	if pc.Heartbeat > 0 {
		cc.heartbeat = time.Duration(pc.Heartbeat)
	}
	if pc.TTL > 0 {
		cc.ttl = time.Duration(pc.TTL)
	}
	if pc.DefaultCap != nil {
		cc.defaultCap = *pc.DefaultCap
	}
	cc.failOpen = pc.FailOpen
	for _, a := range pc.Apps {
		if a.Cap != nil {
			cc.appCaps[a.ID] = *a.Cap
		}
	}
	return cc
}

func sameCaps(a, b capsConfig) bool {
	if a.heartbeat != b.heartbeat || a.ttl != b.ttl || a.failOpen != b.failOpen || a.defaultCap != b.defaultCap || len(a.appCaps) != len(b.appCaps) {
		return false
	}
	for k, v := range a.appCaps {
		if w, ok := b.appCaps[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sameStore(a, b StoreConfig) bool {
	return a.Type == b.Type && a.URL == b.URL && strings.Join(a.Addrs, ",") == strings.Join(b.Addrs, ",") &&
		a.Master == b.Master && a.Username == b.Username && a.Password == b.Password && a.TLS == b.TLS &&
		a.Prefix == b.Prefix && a.FailMode == b.FailMode && a.Budget == b.Budget
}

func (g *Gateway) backendFor(cfg *Config, old *router) (*backend, error) {
	var cc capsConfig
	if cfg.Pusher != nil {
		cc = capsSettings(cfg)
	}
	if old != nil && sameStore(old.backend.cfg, cfg.Store) &&
		(old.backend.caps == nil) == (cfg.Pusher == nil) && (cfg.Pusher == nil || sameCaps(old.backend.capsCfg, cc)) {
		return old.backend, nil // leases and connections carry over
	}
	st, client, err := newStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	var ho *handover
	if old != nil {
		// Requests and WebSockets of the old configuration hold slots in
		// its store until they end: count in both until then.
		ho = newHandover(st, old.backend.store)
		st = ho
	}
	opts := []keycap.Option{keycap.WithObserver(keycap.Observers(g.metrics.keycap, keycap.NewSlogObserver(g.log), g.history)),
		keycap.WithDecisionBudget(time.Duration(cfg.Store.Budget))}
	if m := cfg.Store.FailMode; m != keycap.FailDefault {
		opts = append(opts, keycap.WithDefaultFailMode(m))
	}
	if cfg.Pusher != nil {
		opts = append(opts, keycap.WithHeartbeat(cc.heartbeat))
	}
	// Keys are kept in clear in the process, for the admin API, which
	// shows them as hashes with admin_api.hash_keys.
	opts = append(opts, keycap.WithInspection(keycap.InspectOptions{ShowKeys: true}))
	if st.Features().Has(store.Overrides) {
		opts = append(opts, keycap.WithOverrides(time.Duration(cfg.AdminAPI.OverridesRefresh)))
	}
	limiter, err := keycap.NewLimiter(st, opts...)
	if err != nil {
		return nil, err
	}
	be := &backend{cfg: cfg.Store, store: st, handover: ho, client: client, limiter: limiter, capsCfg: cc, closed: make(chan struct{})}
	if cfg.Pusher != nil {
		spec := keycap.Spec{TTL: cc.ttl, FailMode: keycap.FailClosed}
		if cc.failOpen {
			spec.FailMode = keycap.FailOpen
		}
		copts := []conncap.Option{conncap.WithDefaultCap(cc.defaultCap), conncap.WithSpec(spec)}
		for app, n := range cc.appCaps {
			copts = append(copts, conncap.WithAppCap(app, n))
		}
		if be.caps, err = conncap.New(limiter, copts...); err != nil {
			be.close()
			return nil, err
		}
	}
	return be, nil
}

// routes builds the handlers of the configuration.
func (rt *router) routes(g *Gateway) (err error) {
	cfg := rt.cfg
	cip, err := httplimit.NewClientIP(cfg.ClientIP.Header, cfg.ClientIP.IPv6Prefix, cfg.ClientIP.TrustedProxies...)
	if err != nil {
		return err
	}
	rt.cip = cip
	limits, err := httplimit.New(rt.backend.limiter, httplimit.WithClientIP(cip), httplimit.WithLogger(g.log),
		httplimit.WithOnRefuse(func(r *http.Request, limiter string, err error) {
			q := requestOf(r)
			switch le, ok := errors.AsType[*keycap.LimitError](err); {
			case ok && q != nil:
				q.set(outcomeRefused)
				g.metrics.refusals.WithLabelValues(q.route, keySourceOf(le.Limit.Key())).Inc()
			case errors.Is(err, keycap.ErrStoreUnavailable):
				q.set(outcomeStoreDown)
			default:
				q.set(outcomeOther) // the Limiter closed: a gateway stopping
			}
			g.log.Debug("keycap: request refused", "route", routeOf(r), "request_id", r.Header.Get("X-Request-Id"),
				"limiter", limiter, "method", r.Method, "path", r.URL.Path, "reason", err.Error())
		}))
	if err != nil {
		return err
	}
	var verify *tokenVerifier
	if cfg.JWT != nil {
		if verify, err = newTokenVerifier(cfg.JWT); err != nil {
			return err
		}
	}
	rt.mux = http.NewServeMux()
	handle := func(route, pattern string, h http.Handler) error {
		if err := register(rt.mux, pattern); err != nil {
			return fmt.Errorf("route %q: %v", route, err)
		}
		rt.handlers[pattern] = h
		return nil
	}
	rt.handlers = map[string]http.Handler{}
	parents := map[string]*keycap.Parent{}
	rt.parents = parents
	for _, pc := range cfg.Parents {
		if parents[pc.Name], err = keycap.NewParent("gateway:"+pc.Name, *pc.Max, pc.parentOptions()...); err != nil {
			return err
		}
	}
	registered := map[string]bool{}
	catchAll := true // the unlimited default route, unless a route takes "/"
	for _, r := range cfg.Routes {
		target := cfg.Upstream
		if r.Upstream != "" {
			target = r.Upstream
		}
		t := r.Timeouts
		proxy, err := g.newRouteProxy(r.Name, target, r.Protocol,
			upstreamSettings{dial: time.Duration(t.Dial), responseHeader: time.Duration(t.ResponseHeader), total: time.Duration(t.Total)},
			r.Release, time.Duration(r.MaxHold), cip)
		if err != nil {
			return err
		}
		if !registered[r.Pool] {
			if err := limits.For(r.Pool, ruleFor(r, parents)); err != nil {
				return err
			}
			registered[r.Pool] = true
		}
		h := &routeHandler{
			name:    r.Name,
			metrics: g.metrics,
			history: g.history,
			keys:    newKeyer(r, cip, verify),
			maxBody: int64(*r.MaxBody),
			label:   frontdoor.Labels(rt.backend.limiter),
			next:    limits.Must(r.Pool)(proxy),
		}
		for _, l := range r.Limits {
			h.retry = max(h.retry, retryAfter(l))
		}
		patterns := []string{r.Path}
		if len(r.Methods) > 0 {
			patterns = patterns[:0]
			for _, m := range r.Methods {
				patterns = append(patterns, m+" "+r.Path)
			}
		}
		for _, pat := range patterns {
			if err := handle(r.Name, pat, h); err != nil {
				return err
			}
			catchAll = catchAll && pat != "/"
		}
	}
	if cfg.Pusher != nil {
		pc := cfg.Pusher
		var apps []pushercap.App
		for _, a := range pc.Apps {
			apps = append(apps, pushercap.App{ID: a.ID, Key: a.Key, Secret: a.Secret, ErrorCode: a.ErrorCode, ErrorMessage: a.ErrorMessage})
		}
		opts := []pushercap.Option{pushercap.WithStoreError(pc.StoreErrorCode, pc.StoreErrorMessage)}
		if pc.Signin {
			opts = append(opts, pushercap.WithSignin())
		}
		if rt.gate, err = pushercap.New(rt.backend.caps, apps, opts...); err != nil {
			return err
		}
		up, err := wsTarget(pc.Upstream)
		if err != nil {
			return err
		}
		rt.ws = &wsProxy{g: g, gate: rt.gate, upstream: up, cip: cip,
			maxMessage: int64(*pc.MaxMessage), rate: *pc.MessagesPerSecond, burst: *pc.MessageBurst}
	}
	if catchAll {
		proxy, err := g.newRouteProxy("default", cfg.Upstream, cfg.UpstreamProto,
			upstreamSettings{dial: time.Duration(cfg.Timeouts.Dial), responseHeader: time.Duration(cfg.Timeouts.ResponseHeader), total: time.Duration(cfg.Timeouts.Total)},
			ReleaseOnClientDone, 0, cip)
		if err != nil {
			return err
		}
		rt.catchAll = &routeHandler{name: "default", metrics: g.metrics, history: g.history, maxBody: int64(*cfg.Server.MaxBody), next: proxy}
		if err := handle("default", "/", rt.catchAll); err != nil {
			return err
		}
	}
	return nil
}

// ServeHTTP routes a request by its canonical path (paths.go): the Pusher
// endpoint, a route, or the catch-all.
func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	if id == "" || len(id) > 200 {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
		r.Header.Set("X-Request-Id", id)
	}
	w.Header().Set("X-Request-Id", id)

	canon, err := canonicalPath(r.URL.EscapedPath())
	if err != nil {
		writeError(w, r, http.StatusBadRequest, "Bad Request: invalid path")
		return
	}
	if canon != r.URL.Path || r.URL.RawPath != "" {
		u := *r.URL
		u.Path, u.RawPath = canon, ""
		r = r.WithContext(r.Context())
		r.URL = &u
	}
	if rt.ws != nil && isPusherPath(strings.ToLower(canon)) {
		rt.ws.ServeHTTP(w, r)
		return
	}
	h := rt.handler(r)
	if _, ok := h.(*routeHandler); !ok && isGRPC(r) {
		w = &grpcWriter{ResponseWriter: w} // the mux's 404 or 405
	}
	h.ServeHTTP(w, r)
}

// handler returns the handler of r's route: the one that matches its path,
// else the one that matches a variant of it (other case, other trailing
// slash), else the catch-all.
func (rt *router) handler(r *http.Request) http.Handler {
	h, pattern := rt.mux.Handler(r)
	if pattern == "" {
		return h // 405: another method of the path is routed
	}
	if found := rt.handlers[pattern]; found != rt.catchAll || rt.catchAll == nil {
		return found
	}
	for _, v := range pathVariants(r.URL.Path) {
		alt := *r
		u := *r.URL
		u.Path = v
		alt.URL = &u
		if _, pat := rt.mux.Handler(&alt); pat != "" && rt.handlers[pat] != rt.catchAll {
			return rt.handlers[pat]
		}
	}
	return rt.catchAll
}

// isPusherPath reports whether a canonical path, in lower case, is the Pusher
// endpoint's: every spelling of /app/... goes to the WebSocket handler, which
// serves the exact form /app/{key} only.
func isPusherPath(lower string) bool {
	return lower == "/app" || strings.HasPrefix(lower, "/app/")
}

// routeHandler serves one route: it bounds the request body, finds the keys
// of the route's limits, and hands the request to the limiter's middleware
// and the upstream.
type routeHandler struct {
	name    string
	metrics *metrics
	history *history
	keys    *keyer // nil for the catch-all
	maxBody int64
	label   bool          // the limiter keeps labels: give it the request's ID
	retry   time.Duration // the largest retry_after of its limits: a gRPC call's pushback when the store is down
	next    http.Handler
}

// routeOf returns the name of r's route, "" outside a route.
func routeOf(r *http.Request) string {
	if q := requestOf(r); q != nil {
		return q.route
	}
	return ""
}

// finish counts a request once the route has answered it.
func (h *routeHandler) finish(q *request) {
	outcome := q.result()
	h.metrics.count(q, outcome)
	h.history.request(q, outcome)
}

func (h *routeHandler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &recorder{ResponseWriter: rw, r: request{route: h.name, trace: traceID(r)}}
	q := &w.r
	w.q = q
	defer h.finish(q)
	grpc := isGRPC(r)
	if h.maxBody > 0 {
		switch {
		case r.ContentLength > h.maxBody:
			q.set(outcomeTooLarge)
			writeError(w, r, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
			return
		case r.Body == nil || r.Body == http.NoBody:
		case grpc:
			r.Body = &grpcMessages{ReadCloser: r.Body, max: h.maxBody}
		default:
			r.Body = http.MaxBytesReader(w, r.Body, h.maxBody)
		}
	}
	ctx := context.WithValue(r.Context(), requestKey{}, q)
	var next http.ResponseWriter = w
	if grpc {
		// The limit middleware's answers become gRPC statuses; the call's
		// deadline bounds its wait for a slot and its time upstream.
		next = &grpcWriter{ResponseWriter: w, retry: h.retry}
		if d, ok := grpcTimeout(r); ok {
			q.deadline = time.Now().Add(d)
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadlineCause(ctx, q.deadline, errGRPCDeadline)
			defer cancel()
			defer func() {
				if q.status == 0 && context.Cause(ctx) == errGRPCDeadline {
					// The deadline passed while the call waited for a slot.
					q.set(outcomeUpstreamTimeout)
					writeError(w, r, http.StatusGatewayTimeout, "Gateway Timeout: the call's deadline passed")
				}
			}()
		}
	}
	if h.keys != nil {
		keys, missing, ok := h.keys.keys(r)
		if !ok {
			q.set(outcomeUnauthorized)
			if missing.kind == "claim" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="keycap"`)
			}
			writeError(w, r, http.StatusUnauthorized, "Unauthorized: this route needs "+missing.String())
			return
		}
		ctx = withKeys(ctx, keys)
		if h.label {
			ctx = keycap.WithLabel(ctx, r.Header.Get("X-Request-Id"))
		}
	}
	h.next.ServeHTTP(next, r.WithContext(ctx))
}

func newKeyer(r RouteConfig, cip httplimit.ClientIP, verify *tokenVerifier) *keyer {
	k := &keyer{cip: cip, verify: verify}
	for _, l := range r.Limits {
		src, _ := parseKey(l.Key) // validated
		lk := limitKey{src: src, onMissing: l.OnMissing}
		if l.Parent != "" && (len(l.Shares) > 0 || l.ShareBy != "") {
			lk.share = &shareRule{table: l.Shares, def: max(l.Share, 1)}
			if l.ShareBy != "" {
				by, _ := parseKey(l.ShareBy) // validated
				lk.share.by = &by
			}
		}
		k.limits = append(k.limits, lk)
	}
	for i, l := range r.Limits {
		if l.Weight > 1 {
			if k.weights == nil {
				k.weights = make([]int, len(r.Limits))
			}
			k.weights[i] = l.Weight
		}
	}
	return k
}

// ruleFor turns a route's limits into an httplimit rule, keyed by the keys
// its routeHandler found.
func ruleFor(r RouteConfig, parents map[string]*keycap.Parent) httplimit.LimitFunc {
	specs := make([]keycap.Spec, len(r.Limits))
	slots := make([]httplimit.Slots, len(r.Limits))
	limit := func(sp keycap.Spec, l LimitConfig) httplimit.Slots {
		s := httplimit.Limit(sp).Respond(refuse(retryAfter(l)))
		if l.RetryAfter != nil {
			s = s.RetryAfter(time.Duration(*l.RetryAfter))
		}
		return s
	}
	for i, l := range r.Limits {
		specs[i] = l.spec(parents[l.Parent])
		// The pool's rule is registered by the first route of the pool;
		// each route's own weight comes with its request (keysOf).
		specs[i].Weight = 0
		slots[i] = limit(specs[i], l)
	}
	return func(req *http.Request) httplimit.Rule {
		rk := keysOf(req)
		keys := rk.keys
		if len(slots) == 1 && rk.shares == nil && rk.weights == nil {
			return slots[0].By(keys[0])
		}
		all := make([]httplimit.Slots, len(slots))
		for i, s := range slots {
			all[i] = s.By(keys[i])
			sp, changed := specs[i], false
			if rk.shares != nil && rk.shares[i] > 0 {
				sp.Share, changed = rk.shares[i], true
			}
			if rk.weights != nil && rk.weights[i] > 1 {
				sp.Weight, changed = rk.weights[i], true
			}
			if changed {
				all[i] = limit(sp, r.Limits[i]).By(keys[i])
			}
		}
		if len(all) == 1 {
			return all[0]
		}
		return httplimit.All(all...)
	}
}

// retryAfter is a limit's retry_after: what a refused request is told to
// wait.
func retryAfter(l LimitConfig) time.Duration {
	if l.RetryAfter != nil {
		return time.Duration(*l.RetryAfter)
	}
	return httplimit.DefaultRetryAfter
}

// refuse answers a request a limit refused: 429 as httplimit does, or, to a
// gRPC call, RESOURCE_EXHAUSTED with retry (the limit's exact retry_after,
// which Retry-After rounds up to seconds) as its pushback.
func refuse(retry time.Duration) httplimit.ResponseFunc {
	return func(w http.ResponseWriter, r *http.Request, _ *keycap.LimitError) {
		const msg = "Too Many Concurrent Requests"
		if isGRPC(r) {
			writeGRPCError(w, http.StatusTooManyRequests, msg, retry)
			return
		}
		httplimit.WriteError(w, r, http.StatusTooManyRequests, msg)
	}
}

// Gateway serves a configuration, and swaps in a new one on Reload.
type Gateway struct {
	log        *slog.Logger
	metrics    *metrics
	history    *history // the admin page's, on while the admin API is
	transports *transports

	mu      sync.Mutex // serialises Reload
	current struct {
		sync.RWMutex
		rt *router
	}
	ws       wsConns
	inflight atomic.Int64 // requests being served
	holding  holding      // requests whose client left, held for their upstream
}

// New builds a gateway from cfg.
func New(cfg *Config, log *slog.Logger) (*Gateway, error) {
	g := &Gateway{log: log, metrics: newMetrics(), history: newHistory(), transports: newTransports()}
	rt, err := g.build(cfg, nil)
	if err != nil {
		return nil, err
	}
	g.current.rt = rt
	return g, nil
}

func (g *Gateway) router() *router {
	g.current.RLock()
	defer g.current.RUnlock()
	return g.current.rt
}

// ServeHTTP serves the current configuration's routes.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Counted under the read lock, so that a reload that swaps the
	// configuration out counts every request that can still use its store.
	g.current.RLock()
	rt := g.current.rt
	rt.backend.inflight.Add(1)
	g.current.RUnlock()
	g.inflight.Add(1)
	defer func() {
		g.inflight.Add(-1)
		rt.backend.inflight.Done()
	}()
	rt.ServeHTTP(w, r)
}

// Reload swaps in cfg, atomically: requests in flight finish on the old
// configuration. When the store section (and the connection caps' settings)
// did not change, slots and connections carry over; otherwise the old store
// is closed once the last request and WebSocket that started on it ends.
func (g *Gateway) Reload(cfg *Config) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.router()
	rt, err := g.build(cfg, old)
	if err != nil {
		return err
	}
	g.current.Lock()
	g.current.rt = rt
	g.current.Unlock()
	if be := old.backend; rt.backend != be {
		next := rt.backend
		go func() {
			// Requests that started on the old store release into it, and
			// its WebSockets keep their places in its caps until they end;
			// meanwhile the new store counts its slots in both.
			be.inflight.Wait()
			if next.handover != nil {
				next.handover.end()
			}
			be.close()
		}()
	}
	return nil
}

// Readiness is what /readyz answers: whether the gateway should receive
// traffic, and why.
type Readiness struct {
	Ready    bool   `json:"ready"`
	Draining bool   `json:"draining,omitempty"` // stopping: shutdown_delay runs, then the listeners close
	Store    string `json:"store,omitempty"`    // "up", or why it is not
	HTTP     string `json:"http,omitempty"`     // serving, or refusing (capped routes failing closed)
	WS       string `json:"pusher,omitempty"`   // serving, or refusing new connections
}

// Ready reports whether the gateway can serve. It is ready while its store
// answers; when the store does not, it stays ready as long as it can serve
// something — an uncapped catch-all, a route whose limits fail open, or
// WebSockets failing open — because every gateway sharing the store is in
// the same state, and pulling them all from a load balancer would turn a
// store outage into a full one. It is not ready only when every request and
// every new connection would be refused.
func (g *Gateway) Ready(ctx context.Context) Readiness {
	rt := g.router()
	rd := Readiness{Ready: true, Store: "up", HTTP: "serving"}
	if rt.cfg.Pusher != nil {
		rd.WS = "serving"
	}
	if rt.backend.client == nil {
		return rd
	}
	err := rt.backend.client.Ping(ctx).Err()
	if err == nil {
		return rd
	}
	rd.Store = "down: " + err.Error()
	http, ws := rt.servesWithoutStore()
	if !http {
		rd.HTTP = "refusing: every route fails closed"
	} else {
		rd.HTTP = "serving: limits fail open"
	}
	if rt.cfg.Pusher != nil && !ws {
		rd.WS = "refusing new connections: the pusher section fails closed"
	} else if rt.cfg.Pusher != nil {
		rd.WS = "serving: fails open"
	}
	rd.Ready = http || (rt.cfg.Pusher != nil && ws)
	return rd
}

// servesWithoutStore reports whether some HTTP request, and whether a new
// WebSocket, is served while the store does not answer.
func (rt *router) servesWithoutStore() (http, ws bool) {
	if rt.catchAll != nil {
		http = true
	}
	def := rt.cfg.Store.FailMode != keycap.FailClosed
	for _, r := range rt.cfg.Routes {
		open := true
		for _, l := range r.Limits {
			if l.FailMode == keycap.FailClosed || (l.FailMode == keycap.FailDefault && !def) {
				open = false
			}
		}
		http = http || open
	}
	return http, rt.cfg.Pusher != nil && rt.cfg.Pusher.FailOpen
}

// Close closes the open WebSockets (with 1001, going away: clients reconnect
// elsewhere) and the store.
func (g *Gateway) Close() {
	g.ws.closeAll()
	g.router().backend.close()
	g.history.close()
}
