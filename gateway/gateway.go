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
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pushercap"
	"github.com/keycap/keycap/redisstore"
)

// backend is what a configuration's store section builds, kept across
// reloads that leave that section unchanged.
type backend struct {
	cfg     StoreConfig
	store   keycap.Store
	client  redis.UniversalClient // nil for memory
	limiter *keycap.Limiter
	caps    *conncap.Cap // nil without a pusher section
	capsCfg capsConfig

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

func failMode(s string) keycap.FailMode {
	switch s {
	case "open":
		return keycap.FailOpen
	case "closed":
		return keycap.FailClosed
	}
	return keycap.FailDefault
}

// router is one configuration made into handlers; a reload builds a new one
// and swaps it in whole.
type router struct {
	cfg     *Config
	backend *backend
	http    http.Handler
	gate    *pushercap.Gate
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
	return rt, nil
}

func capsSettings(cfg *Config) capsConfig {
	pc := cfg.Pusher
	cc := capsConfig{heartbeat: conncap.DefaultHeartbeat, ttl: conncap.DefaultTTL, defaultCap: conncap.DefaultCap, appCaps: map[string]int{}}
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
		a.Prefix == b.Prefix && a.FailMode == b.FailMode
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
	store, client, err := newStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	opts := []keycap.Option{keycap.WithObserver(keycap.Observers(g.metrics.keycap, keycap.NewSlogObserver(g.log)))}
	if m := failMode(cfg.Store.FailMode); m != keycap.FailDefault {
		opts = append(opts, keycap.WithDefaultFailMode(m))
	}
	limiter, err := keycap.NewLimiter(store, opts...)
	if err != nil {
		return nil, err
	}
	be := &backend{cfg: cfg.Store, store: store, client: client, limiter: limiter, capsCfg: cc, closed: make(chan struct{})}
	if cfg.Pusher != nil {
		copts := []conncap.Option{
			conncap.WithDefaultCap(cc.defaultCap),
			conncap.WithHeartbeat(cc.heartbeat, cc.ttl),
			conncap.WithObserver(g.metrics.conns),
		}
		for app, n := range cc.appCaps {
			copts = append(copts, conncap.WithAppCap(app, n))
		}
		if cc.failOpen {
			copts = append(copts, conncap.WithFailOpen())
		}
		if be.caps, err = conncap.New(store, copts...); err != nil {
			be.close()
			return nil, err
		}
	}
	return be, nil
}

// routes builds the HTTP handlers.
func (rt *router) routes(g *Gateway) (err error) {
	cfg := rt.cfg
	cip, err := httplimit.NewClientIP(cfg.ClientIP.Header, cfg.ClientIP.IPv6Prefix, cfg.ClientIP.TrustedProxies...)
	if err != nil {
		return err
	}
	limits, err := httplimit.New(rt.backend.limiter, httplimit.WithClientIP(cip), httplimit.WithLogger(g.log))
	if err != nil {
		return err
	}
	var verify *tokenVerifier
	if cfg.JWT != nil {
		if verify, err = newTokenVerifier(cfg.JWT); err != nil {
			return err
		}
	}
	mux := http.NewServeMux()
	handle := func(route, pattern string, h http.Handler) (err error) {
		defer func() {
			// ServeMux panics on conflicting patterns: a configuration error.
			if r := recover(); r != nil {
				err = fmt.Errorf("route %q: %v", route, r)
			}
		}()
		mux.Handle(pattern, h)
		return nil
	}
	defaultProxy, err := g.proxy(cfg.Upstream)
	if err != nil {
		return err
	}
	registered := map[string]bool{}
	catchAll := true // the unlimited default route, unless a route takes "/"
	for _, r := range cfg.Routes {
		target := defaultProxy
		if r.Upstream != "" {
			if target, err = g.proxy(r.Upstream); err != nil {
				return err
			}
		}
		if !registered[r.Pool] {
			if err := limits.For(r.Pool, ruleFor(r, cip, verify)); err != nil {
				return err
			}
			registered[r.Pool] = true
		}
		h := limits.Must(r.Pool)(target)
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
		var apps []pushercap.App
		for _, a := range cfg.Pusher.Apps {
			apps = append(apps, pushercap.App{ID: a.ID, Key: a.Key, Secret: a.Secret, ErrorCode: a.ErrorCode, ErrorMessage: a.ErrorMessage})
		}
		var opts []pushercap.Option
		if cfg.Pusher.Signin {
			opts = append(opts, pushercap.WithSignin())
		}
		if rt.gate, err = pushercap.New(rt.backend.caps, apps, opts...); err != nil {
			return err
		}
		up, err := wsTarget(cfg.Pusher.Upstream)
		if err != nil {
			return err
		}
		if err := handle("pusher", "GET /app/", &wsProxy{g: g, gate: rt.gate, upstream: up}); err != nil {
			return err
		}
	}
	if catchAll {
		mux.Handle("/", defaultProxy)
	}
	rt.http = requestID(mux)
	return nil
}

// ruleFor turns a route's limits into an httplimit rule.
func ruleFor(r RouteConfig, cip httplimit.ClientIP, verify *tokenVerifier) httplimit.LimitFunc {
	type limit struct {
		slots httplimit.Slots
		key   func(*http.Request) string
	}
	var ls []limit
	for _, l := range r.Limits {
		s := httplimit.Max(*l.Max).Wait(time.Duration(l.Wait))
		if l.TTL > 0 {
			s = s.TTL(time.Duration(l.TTL))
		}
		if l.RetryAfter != nil {
			s = s.RetryAfter(time.Duration(*l.RetryAfter))
		}
		switch l.FailMode {
		case "open":
			s = s.FailOpen()
		case "closed":
			s = s.FailClosed()
		}
		ls = append(ls, limit{s, keyFunc(l.Key, cip, verify)})
	}
	return func(req *http.Request) httplimit.Rule {
		if len(ls) == 1 {
			return ls[0].slots.By(ls[0].key(req))
		}
		all := make([]httplimit.Slots, len(ls))
		for i, l := range ls {
			all[i] = l.slots.By(l.key(req))
		}
		return httplimit.All(all...)
	}
}

// keyFunc returns how a limit's key is read from a request. A request
// without the header, cookie or valid token a key names is counted by its
// client address: unverified callers share the pool of their address.
func keyFunc(key string, cip httplimit.ClientIP, verify *tokenVerifier) func(*http.Request) string {
	kind, name, _ := strings.Cut(key, ":")
	switch kind {
	case "header":
		return func(r *http.Request) string {
			if v := r.Header.Get(name); v != "" {
				return "header:" + v
			}
			return cip.Key(r)
		}
	case "cookie":
		return func(r *http.Request) string {
			if c, err := r.Cookie(name); err == nil && c.Value != "" {
				return "cookie:" + c.Value
			}
			return cip.Key(r)
		}
	case "claim":
		return func(r *http.Request) string {
			if v, ok := verify.claim(r, name); ok {
				return "claim:" + v
			}
			return cip.Key(r)
		}
	}
	return cip.Key
}

// proxy returns a reverse proxy to target that streams responses as they
// come (server-sent events, chunked bodies) and answers 502 when the
// upstream fails.
func (g *Gateway) proxy(target string) (http.Handler, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport:     g.transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				g.log.Warn("keycap: upstream failed", "upstream", target, "method", r.Method, "path", r.URL.Path, "error", err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}, nil
}

// requestID gives each request an X-Request-Id, keeping one the client (or
// a proxy before the gateway) set, and forwards it upstream and back.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if id == "" {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
			r.Header.Set("X-Request-Id", id)
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r)
	})
}

// Gateway serves a configuration, and swaps in a new one on Reload.
type Gateway struct {
	log       *slog.Logger
	metrics   *metrics
	transport *http.Transport

	mu      sync.Mutex // serialises Reload
	current struct {
		sync.RWMutex
		rt *router
	}
	ws wsConns
}

// New builds a gateway from cfg.
func New(cfg *Config, log *slog.Logger) (*Gateway, error) {
	g := &Gateway{
		log:     log,
		metrics: newMetrics(),
		transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		},
	}
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
	defer rt.backend.inflight.Done()
	rt.http.ServeHTTP(w, r)
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
		go func() {
			// Requests that started on the old store release into it, and
			// its WebSockets keep their places in its caps until they end.
			be.inflight.Wait()
			be.close()
		}()
	}
	return nil
}

// Ready reports whether the gateway can serve: its store answers, or every
// limit fails open so that it serves without it.
func (g *Gateway) Ready(ctx context.Context) error {
	rt := g.router()
	if rt.backend.client == nil {
		return nil
	}
	err := rt.backend.client.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	if rt.failsOpen() {
		return nil
	}
	return fmt.Errorf("store: %w", err)
}

// failsOpen reports whether every limit of the configuration fails open.
func (rt *router) failsOpen() bool {
	def := rt.cfg.Store.FailMode != "closed"
	for _, r := range rt.cfg.Routes {
		for _, l := range r.Limits {
			if l.FailMode == "closed" || (l.FailMode == "" && !def) {
				return false
			}
		}
	}
	return rt.cfg.Pusher == nil || rt.cfg.Pusher.FailOpen
}

// Close closes the open WebSockets (with 1001, going away: clients reconnect
// elsewhere) and the store.
func (g *Gateway) Close() {
	g.ws.closeAll()
	g.router().backend.close()
}
