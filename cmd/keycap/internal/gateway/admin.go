package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/store"
)

// The admin API and page (docs/gateway.md, "Admin API"): on the admin
// listener only, behind the bearer token of admin_api.token.
//
//	GET    /admin/                  the page: routes, keys, waiters, refusals, pauses, connections
//	GET    /admin/api/summary       the page's figures, as JSON
//	GET    /admin/api/pools         one page of a limit's pools with their holders (?route= or ?app=, &cursor=, &shadow=true)
//	GET    /admin/api/overrides     the overrides in force
//	PUT    /admin/api/overrides     set one: {"route":"api","key":"header:X-User=alice","max":10,"ttl":"1h"}
//	DELETE /admin/api/overrides     reset one: ?route=api&key=header:X-User=alice
//	GET    /admin/api/history       this gateway's last 15 minutes (incident.go)
//	GET    /admin/api/key           one key's pools, holders and history

// adminCookie is the page's cookie, set by POST /admin/login: a value
// derived from the token (cookieValue), so that a stolen cookie opens the
// page only, never the API.
const adminCookie = "keycap_admin"

// cookieValue is the page cookie of a token: an HMAC of a fixed message
// under it. A reload that changes the token signs everyone out.
func cookieValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("keycap admin page"))
	return hex.EncodeToString(m.Sum(nil))
}

// summaryPages bounds the pages of pools a summary reads per limit name.
const summaryPages = 10

// adminRoutes adds the admin API and page to mux.
func (s *Server) adminRoutes(mux *http.ServeMux) {
	api := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.authorized(false, h)) }
	api("GET /admin/api/summary", s.apiSummary)
	api("GET /admin/api/pools", s.apiPools)
	api("GET /admin/api/overrides", s.apiOverrides)
	api("PUT /admin/api/overrides", s.apiSetOverride)
	api("DELETE /admin/api/overrides", s.apiResetOverride)
	api("GET /admin/api/history", s.apiHistory)
	api("GET /admin/api/key", s.apiKey)
	mux.Handle("GET /admin/{$}", s.authorized(true, s.page))
	mux.Handle("GET /admin/key", s.authorized(true, s.keyPage))
	mux.Handle("POST /admin/override", http.NewCrossOriginProtection().Handler(s.authorized(true, s.pageOverride)))
	mux.HandleFunc("GET /admin/login", s.loginForm)
	mux.HandleFunc("POST /admin/login", s.login)
}

// token returns the configuration's admin token, "" when the admin API is off.
func (s *Server) token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.AdminAPI.Token
}

// authorized serves h to requests that carry the token: as a bearer token,
// or, for the page (cookie), in the cookie the login sets. Without a token
// configured, the admin API does not exist (404).
func (s *Server) authorized(cookie bool, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := s.token()
		if want == "" {
			adminOff(w, cookie)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok && cookie {
			if c, err := r.Cookie(adminCookie); err == nil {
				got, want, ok = c.Value, cookieValue(want), true
			}
		}
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			if cookie {
				http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="keycap admin"`)
			adminError(w, http.StatusUnauthorized, "a valid bearer token is needed (admin_api.token)")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h(w, r)
	})
}

// adminOffMsg tells a request to the admin page or API, while they are
// off, how to turn them on.
const adminOffMsg = `the admin page and API are off: set admin_api.token in the configuration (or KEYCAP_ADMIN_TOKEN), then reload or restart the gateway (docs/gateway.md, "The admin API and page")`

// adminOff answers a request to the admin page (page: as text) or API (as
// JSON) while they are off: 404, and how to turn them on.
func adminOff(w http.ResponseWriter, page bool) {
	if page {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, adminOffMsg+"\n")
		return
	}
	adminError(w, http.StatusNotFound, adminOffMsg)
}

func adminError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Summary is what the page shows, and GET /admin/api/summary returns.
type Summary struct {
	Node      string         `json:"node"`
	At        time.Time      `json:"at"`
	Limits    []LimitSummary `json:"limits"`
	Apps      []AppSummary   `json:"apps,omitempty"`
	Pauses    []PauseSummary `json:"pauses"`
	Totals    []TotalSummary `json:"totals,omitempty"` // the adaptive parents
	Overrides []OverrideView `json:"overrides"`
	Problems  []string       `json:"problems,omitempty"` // what could not be read (the store failing, say)
}

// LimitSummary is one limit of the gateway — a route's pool and the source
// of its keys (a route with a limit per user and one per address has two) —
// with every route that counts in it, its pools across every gateway of the
// store, and this gateway's refusals. The keys of a pool with several
// limits that this gateway has not seen (held through other gateways only)
// cannot be told apart: they count in a limit of their own, Source "".
type LimitSummary struct {
	Pool      string     `json:"pool"`
	Source    string     `json:"source"` // header:X-User, claim:sub, ip, …; "": keys of the pool no limit can be told for
	Routes    []string   `json:"routes"`
	Shadow    bool       `json:"shadow"`
	Max       string     `json:"max"` // the configured max per key ("3", or "3, 10" when the routes of the pool differ)
	Keys      int        `json:"keys"`
	InUse     int        `json:"in_use"` // slots held, over every key
	Waiting   int        `json:"waiting"`
	AtCap     int        `json:"keys_at_cap"` // keys holding their max
	Busiest   []KeyUsage `json:"busiest"`
	Refusals  int        `json:"recent_refusals"`     // this gateway's, within the last 10 s
	PerSecond float64    `json:"refusals_per_second"` // the same, per second
	Truncated bool       `json:"truncated,omitempty"` // more pools than a summary reads

	src keySource
}

// KeyUsage is one key's pool.
type KeyUsage struct {
	Key        string `json:"key"` // in clear unless admin_api.hash_keys (and known here), else "#" and the pool's hash
	Held       int    `json:"held"`
	Max        int    `json:"max"` // -1: unknown (a key this gateway has not seen)
	Waiting    int    `json:"waiting"`
	Overridden bool   `json:"overridden,omitempty"`
}

// AppSummary is one Pusher app's connections.
type AppSummary struct {
	App         string     `json:"app"`
	Cap         int        `json:"cap_per_user"`
	Users       int        `json:"users"`
	Connections int        `json:"connections"`
	Busiest     []KeyUsage `json:"busiest"`
	Truncated   bool       `json:"truncated,omitempty"`
}

// PauseSummary is one API pause running in the store.
type PauseSummary struct {
	ID   string  `json:"id"`
	Pace bool    `json:"pace"`
	Left float64 `json:"left_seconds"`
}

// OverrideView is one override, as the API shows and takes it.
type OverrideView struct {
	Family string  `json:"family"` // app (a route's pool) or conn (a Pusher app)
	Name   string  `json:"name"`   // the pool or the app
	Key    string  `json:"key"`
	Max    *int    `json:"max,omitempty"`
	Share  int     `json:"share,omitempty"`
	TTL    float64 `json:"ttl_seconds,omitempty"`
}

// SummaryEvery is how often, at most, the gateway reads the figures of the
// admin page from the store, however many people look: each reading pages
// through every limit's pools (on Redis, a SCAN of their keys).
const SummaryEvery = time.Second

// TotalSummary is where an adaptive parent's total stands, as this gateway
// follows it (keycap.Tuning).
type TotalSummary struct {
	Parent    string  `json:"parent"` // as named in the file
	Total     int     `json:"total"`
	Floor     int     `json:"floor"`
	Ceiling   int     `json:"ceiling"`
	Shadow    bool    `json:"shadow"`
	Reason    string  `json:"reason"`            // why it is what it is; "unused" before any request here
	Latency   float64 `json:"latency_seconds"`   // mean latency of the last interval, on every gateway
	Baseline  float64 `json:"baseline_seconds"`  // the no-load latency it compares with
	InFlight  float64 `json:"in_flight"`         // average slots held over the last interval
	Completed int64   `json:"completed"`         // in the last interval
	Overloads int64   `json:"overloads"`         // in the last interval
	Version   int64   `json:"version,omitempty"` // the interval that decided it
}

// totals summarises rt's adaptive parents.
func totals(rt *router) []TotalSummary {
	var out []TotalSummary
	for _, pc := range rt.cfg.Parents {
		p := rt.parents[pc.Name]
		a, ok := p.Adaptive()
		if !ok {
			continue
		}
		ts := TotalSummary{Parent: pc.Name, Total: p.Max(), Floor: a.Floor, Ceiling: a.Ceiling, Shadow: a.Shadow, Reason: "unused"}
		if tu, ok := rt.backend.limiter.Tuning(p); ok {
			ts.Total, ts.Reason, ts.Version = tu.Total, tu.Reason, tu.Version
			ts.Latency, ts.Baseline, ts.InFlight = tu.Mean.Seconds(), tu.Baseline.Seconds(), tu.InFlight
			ts.Completed, ts.Overloads = tu.Completed, tu.Overloads
		}
		out = append(out, ts)
	}
	return out
}

// summaryCache holds the last summary. Its lock is held while one is
// computed, so that viewers arriving meanwhile wait for it and share it.
type summaryCache struct {
	mu  sync.Mutex
	at  time.Time
	sum Summary
}

// cachedSummary returns a summary at most SummaryEvery old.
func (s *Server) cachedSummary(ctx context.Context) Summary {
	c := &s.summaries
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < SummaryEvery {
		return c.sum
	}
	// Not the first viewer's context: the summary is everyone's, and a
	// viewer who leaves must not cut it short.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	c.sum, c.at = s.summary(ctx), time.Now()
	return c.sum
}

// forgetSummary drops the cached summary: an override changed what it shows.
func (s *Server) forgetSummary() {
	s.summaries.mu.Lock()
	s.summaries.at = time.Time{}
	s.summaries.mu.Unlock()
}

// summary reads the figures of the page.
func (s *Server) summary(ctx context.Context) Summary {
	rt := s.gw.router()
	cfg := rt.cfg
	lim := rt.backend.limiter
	show := !cfg.AdminAPI.HashKeys
	sum := Summary{Node: frontdoor.Node(lim), At: time.Now().UTC(), Totals: totals(rt)}
	problem := func(what string, err error) {
		sum.Problems = append(sum.Problems, what+": "+err.Error())
	}
	for _, g := range limitGroups(cfg) {
		in := keycap.Inspection{Family: keycap.FamilyApp, Name: g.pool, Shadow: g.shadow}
		reports, rate, truncated, err := inspectAll(ctx, lim, in)
		if err != nil {
			problem("limit "+g.pool, err)
		}
		seen := s.gw.history.keysOf(g.pool, g.shadow)
		for _, rep := range reports {
			key, known := rep.Key, rep.KeyShown
			if !known {
				key, known = seen[rep.Pool]
			}
			i := slices.IndexFunc(g.limits, func(l LimitSummary) bool { return known && keyFrom(key, l.src) })
			if i < 0 && len(g.limits) == 1 {
				i = 0 // the pool's only limit: every key is its
			}
			var ls *LimitSummary
			if i >= 0 {
				ls = &g.limits[i]
			} else {
				if g.unknown == nil {
					g.unknown = &LimitSummary{Pool: g.pool, Routes: g.limits[0].Routes, Shadow: g.shadow, Source: "", Max: "?"}
				}
				ls = g.unknown
			}
			ls.Keys++
			ls.InUse += rep.Held
			ls.Waiting += len(rep.Waiting)
			u := KeyUsage{Key: "#" + rep.Pool.String(), Held: rep.Held, Max: -1, Waiting: len(rep.Waiting)}
			if known {
				if show {
					u.Key = key
				}
				if i >= 0 {
					s.usage(rt, g.pool, g.shadow, key, &u)
				}
			}
			ls.Busiest = append(ls.Busiest, u)
		}
		if g.unknown != nil {
			g.limits = append(g.limits, *g.unknown)
		}
		for i := range g.limits {
			ls := &g.limits[i]
			ls.Truncated = truncated
			ls.AtCap = atCap(ls.Busiest)
			ls.Busiest = busiest(ls.Busiest)
			switch perSecond, ok := s.gw.history.recentRate(g.pool, g.shadow, ls.Source); {
			case ok:
				ls.PerSecond = perSecond
			case len(g.limits) == 1:
				ls.PerSecond = rate // no history: the pool's rate is its only limit's
			}
			ls.Refusals = int(ls.PerSecond*refusalWindow.Seconds() + 0.5)
			sum.Limits = append(sum.Limits, *ls)
		}
	}
	if pc := cfg.Pusher; pc != nil && rt.backend.caps != nil {
		for _, app := range pc.Apps {
			as := AppSummary{App: app.ID, Cap: rt.backend.caps.CapOf(app.ID)}
			reports, _, truncated, err := inspectAll(ctx, lim, keycap.Inspection{Family: keycap.FamilyConn, Name: app.ID})
			if err != nil {
				problem("app "+app.ID, err)
			}
			as.Truncated = truncated
			for _, rep := range reports {
				as.Users++
				as.Connections += rep.Held
				u := KeyUsage{Key: keyOf(rep, show), Held: rep.Held, Max: -1}
				if rep.KeyShown { // a user this gateway serves: their cap, with its override
					u.Max = lim.Overridden(connLimit(app.ID, rep.Key, as.Cap)).Max()
				}
				as.Busiest = append(as.Busiest, u)
			}
			as.Busiest = busiest(as.Busiest)
			sum.Apps = append(sum.Apps, as)
		}
	}
	if st := rt.backend.store; st.Features().Has(store.Inspection) {
		for _, what := range []string{"pause", "pace"} {
			page, err := st.InspectPauses(ctx, store.PageQuery{Tag: store.TagOf(byte(keycap.FamilyPause), what)})
			if err != nil {
				problem("pauses", err)
				break
			}
			for _, p := range page.Pauses {
				sum.Pauses = append(sum.Pauses, PauseSummary{ID: p.ID.String(), Pace: p.Pace, Left: p.Left.Seconds()})
			}
		}
	}
	if ovs, err := lim.Overrides(ctx); err == nil {
		sum.Overrides = overrideViews(ovs, show)
	} else if !errors.Is(err, keycap.ErrNotSupported) {
		problem("overrides", err)
	}
	return sum
}

// limitGroup is one pool of the configuration (real or shadow) and its
// limits, one per key source, in the order the routes give them.
type limitGroup struct {
	pool    string
	shadow  bool
	limits  []LimitSummary
	unknown *LimitSummary // the pool's keys that no limit can be told for (a route with several limits)
}

// limitGroups lists the configuration's limits, grouped by pool.
func limitGroups(cfg *Config) []*limitGroup {
	var groups []*limitGroup
	find := func(pool string, shadow bool) *limitGroup {
		for _, g := range groups {
			if g.pool == pool && g.shadow == shadow {
				return g
			}
		}
		g := &limitGroup{pool: pool, shadow: shadow}
		groups = append(groups, g)
		return g
	}
	for _, r := range cfg.Routes {
		for _, l := range r.Limits {
			src, _ := parseKey(l.Key) // validated
			g := find(r.Pool, l.Shadow)
			i := slices.IndexFunc(g.limits, func(ls LimitSummary) bool { return ls.Source == src.String() })
			if i < 0 {
				g.limits = append(g.limits, LimitSummary{Pool: r.Pool, Shadow: l.Shadow, Source: src.String(), src: src})
				i = len(g.limits) - 1
			}
			ls := &g.limits[i]
			if !slices.Contains(ls.Routes, r.Name) {
				ls.Routes = append(ls.Routes, r.Name)
			}
			if m := strconv.Itoa(*l.Max); !slices.Contains(strings.Split(ls.Max, ", "), m) {
				ls.Max = strings.TrimPrefix(ls.Max+", "+m, ", ")
			}
		}
	}
	return groups
}

// atCap counts the keys at or over their max.
func atCap(us []KeyUsage) int {
	n := 0
	for _, u := range us {
		if u.Max >= 0 && u.Held >= u.Max {
			n++
		}
	}
	return n
}

// inspectAll reads up to summaryPages pages of a limit's pools, and this
// gateway's refusals per second of it.
func inspectAll(ctx context.Context, lim *keycap.Limiter, in keycap.Inspection) (pools []keycap.PoolReport, rate float64, truncated bool, err error) {
	for i := range summaryPages {
		rep, err := lim.Inspect(ctx, in)
		if err != nil {
			return pools, rate, false, err
		}
		if i == 0 {
			rate = rep.RefusalsPerSecond
		}
		pools = append(pools, rep.Pools...)
		if rep.Next == "" {
			return pools, rate, false, nil
		}
		in.Cursor = rep.Next
	}
	return pools, rate, true, nil
}

// usage fills in a known key's max: the configured one of the limit whose
// key source the key has, with its override.
func (s *Server) usage(rt *router, pool string, shadow bool, key string, u *KeyUsage) {
	for _, r := range rt.cfg.Routes {
		if r.Pool != pool {
			continue
		}
		for _, l := range r.Limits {
			src, _ := parseKey(l.Key)
			if l.Shadow != shadow || !keyFrom(key, src) {
				continue
			}
			base := keycap.Spec{Name: pool, Max: *l.Max, Shadow: shadow}.For(key)
			eff := rt.backend.limiter.Overridden(base)
			u.Max, u.Overridden = eff.Max(), eff.Max() != base.Max()
			return
		}
	}
}

// keyFrom reports whether key is one the source makes (keys.go).
func keyFrom(key string, src keySource) bool {
	if src.kind == "ip" {
		return strings.HasPrefix(key, "ip:")
	}
	return strings.HasPrefix(key, src.String()+"=") || strings.HasPrefix(key, src.String()+" absent, ")
}

func connLimit(app, user string, cap int) keycap.Limit {
	return keycap.Spec{Name: app, Max: cap, Family: keycap.FamilyConn}.For(user)
}

// refusalWindow is how far back the Limiter's refusal rate looks
// (keycap.Report.RefusalsPerSecond).
const refusalWindow = 10 * time.Second

// keyOf is a pool's key as the admin API shows it.
func keyOf(rep keycap.PoolReport, show bool) string {
	if show && rep.KeyShown {
		return rep.Key
	}
	return "#" + rep.Pool.String()
}

// busiest keeps the ten keys that hold the most, then wait the most.
func busiest(us []KeyUsage) []KeyUsage {
	slices.SortStableFunc(us, func(a, b KeyUsage) int {
		if a.Held != b.Held {
			return b.Held - a.Held
		}
		if a.Waiting != b.Waiting {
			return b.Waiting - a.Waiting
		}
		return strings.Compare(a.Key, b.Key)
	})
	return us[:min(len(us), 10)]
}

// overrideViews shows overrides; their keys in clear only with show (else
// the pool's hash, as everywhere else).
func overrideViews(ovs []keycap.Override, show bool) []OverrideView {
	out := make([]OverrideView, 0, len(ovs))
	for _, o := range ovs {
		key := o.Key
		if !show {
			key = "#" + o.Pool.String()
		}
		v := OverrideView{Family: o.Family.String(), Name: o.Name, Key: key, Share: o.Share, TTL: o.TTL.Seconds()}
		if o.Max >= 0 {
			m := o.Max
			v.Max = &m
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b OverrideView) int {
		return strings.Compare(a.Family+a.Name+"\x00"+a.Key, b.Family+b.Name+"\x00"+b.Key)
	})
	return out
}

func (s *Server) apiSummary(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	writeJSON(w, s.cachedSummary(ctx))
}

// PoolsPage is one page of GET /admin/api/pools.
type PoolsPage struct {
	Pools []PoolView `json:"pools"`
	Next  string     `json:"next,omitempty"`
}

// PoolView is one pool with its holders and its line.
type PoolView struct {
	Key     string       `json:"key"`
	Held    int          `json:"held"`
	Holders []HolderView `json:"holders"`
	Waiting []WaiterView `json:"waiting"`
}

// HolderView is one lease.
type HolderView struct {
	Owner   string  `json:"owner"`
	Weight  int     `json:"weight"`
	Age     float64 `json:"age_seconds"`
	Expires float64 `json:"expires_in_seconds"`
	Node    string  `json:"node,omitempty"`
	Here    bool    `json:"here"`
	Label   string  `json:"label,omitempty"` // the request's X-Request-Id, for this gateway's leases
}

// WaiterView is one ticket in a line.
type WaiterView struct {
	Owner   string  `json:"owner"`
	Expires float64 `json:"expires_in_seconds"`
}

func (s *Server) apiPools(w http.ResponseWriter, r *http.Request) {
	rt := s.gw.router()
	q := r.URL.Query()
	in := keycap.Inspection{Cursor: q.Get("cursor"), Shadow: q.Get("shadow") == "true"}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		in.Limit = min(n, 1000)
	}
	switch route, app := q.Get("route"), q.Get("app"); {
	case route != "":
		pool, ok := poolOf(rt.cfg, route)
		if !ok {
			adminError(w, http.StatusNotFound, fmt.Sprintf("no route %q", route))
			return
		}
		in.Family, in.Name = keycap.FamilyApp, pool
	case app != "" && hasApp(rt.cfg, app):
		in.Family, in.Name = keycap.FamilyConn, app
	default:
		adminError(w, http.StatusBadRequest, "name a configured route (?route=) or Pusher app (?app=)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rep, err := rt.backend.limiter.Inspect(ctx, in)
	if err != nil {
		adminError(w, http.StatusBadGateway, err.Error())
		return
	}
	show := !rt.cfg.AdminAPI.HashKeys
	page := PoolsPage{Next: rep.Next, Pools: []PoolView{}}
	for _, p := range rep.Pools {
		page.Pools = append(page.Pools, poolView(p, show))
	}
	writeJSON(w, page)
}

// poolView is one pool as the API shows it.
func poolView(p keycap.PoolReport, show bool) PoolView {
	pv := PoolView{Key: keyOf(p, show), Held: p.Held, Holders: []HolderView{}, Waiting: []WaiterView{}}
	for _, h := range p.Holders {
		pv.Holders = append(pv.Holders, HolderView{Owner: h.Owner.String(), Weight: h.Weight, Age: h.Age.Seconds(),
			Expires: h.Expires.Seconds(), Node: h.Node, Here: h.Here, Label: h.Label})
	}
	for _, wt := range p.Waiting {
		pv.Waiting = append(pv.Waiting, WaiterView{Owner: wt.Owner.String(), Expires: wt.Expires.Seconds()})
	}
	return pv
}

func poolOf(cfg *Config, route string) (string, bool) {
	for _, r := range cfg.Routes {
		if r.Name == route {
			return r.Pool, true
		}
	}
	return "", false
}

func hasApp(cfg *Config, app string) bool {
	if cfg.Pusher == nil {
		return false
	}
	for _, a := range cfg.Pusher.Apps {
		if a.ID == app {
			return true
		}
	}
	return false
}

func (s *Server) apiOverrides(w http.ResponseWriter, r *http.Request) {
	rt := s.gw.router()
	ovs, err := rt.backend.limiter.Overrides(r.Context())
	if err != nil {
		adminError(w, http.StatusBadGateway, err.Error())
		return
	}
	writeJSON(w, overrideViews(ovs, !rt.cfg.AdminAPI.HashKeys))
}

// OverrideRequest is the body of PUT /admin/api/overrides.
type OverrideRequest struct {
	Route string `json:"route"` // a route: its pool's key
	App   string `json:"app"`   // or a Pusher app: a user's connections
	Key   string `json:"key"`   // as the gateway builds it: header:X-User=alice, claim:sub=42, ip:203.0.113.7
	Max   *int   `json:"max"`   // omitted: unchanged
	Share int    `json:"share"` // 0: unchanged
	TTL   string `json:"ttl"`   // "1h"; "": until reset
}

// maxOverrideBody bounds the body of an override request.
const maxOverrideBody = 64 << 10

func (s *Server) apiSetOverride(w http.ResponseWriter, r *http.Request) {
	var req OverrideRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxOverrideBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		adminError(w, http.StatusBadRequest, "invalid override: "+err.Error())
		return
	}
	if status, err := s.setOverride(r, req, "api"); err != nil {
		adminError(w, status, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// setOverride sets the override req asks for, from the API or the page
// (by), and logs it; on error, the status to answer.
func (s *Server) setOverride(r *http.Request, req OverrideRequest, by string) (int, error) {
	o, err := s.overrideOf(req.Route, req.App, req.Key)
	if err != nil {
		return http.StatusBadRequest, err
	}
	switch {
	case req.Max == nil && req.Share == 0:
		return http.StatusBadRequest, errors.New("give a max or a share (or both): an override that changes neither does nothing")
	case req.Max != nil && (*req.Max < 0 || *req.Max > MaxOverride):
		return http.StatusBadRequest, fmt.Errorf("max %d: must be between 0 (refuse every request of the key) and %d", *req.Max, MaxOverride)
	case req.Share < 0 || req.Share > MaxShare:
		return http.StatusBadRequest, fmt.Errorf("share %d: must be between 1 and %d (0: unchanged)", req.Share, MaxShare)
	}
	o.Max, o.Share = keycap.KeepMax, req.Share
	if req.Max != nil {
		o.Max = *req.Max
	}
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			return http.StatusBadRequest, fmt.Errorf("invalid ttl %q: a positive duration such as 30m or 2h", req.TTL)
		}
		o.TTL = d
	}
	if err := s.gw.router().backend.limiter.SetOverride(r.Context(), o); err != nil {
		if _, ok := errors.AsType[*keycap.InvalidLimitError](err); ok {
			return http.StatusBadRequest, err
		}
		return http.StatusBadGateway, err
	}
	s.forgetSummary()
	var maxAttr any = o.Max
	if o.Max == keycap.KeepMax {
		maxAttr = "unchanged"
	}
	s.log.Info("keycap: override set", "family", o.Family.String(), "name", o.Name, "key", s.logKey(o),
		"max", maxAttr, "share", o.Share, "ttl", o.TTL, "by", by, "remote", r.RemoteAddr)
	return 0, nil
}

func (s *Server) apiResetOverride(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if status, err := s.resetOverride(r, q.Get("route"), q.Get("app"), q.Get("key"), "api"); err != nil {
		adminError(w, status, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resetOverride resets an override, from the API or the page (by), and
// logs it; on error, the status to answer.
func (s *Server) resetOverride(r *http.Request, route, app, key, by string) (int, error) {
	o, err := s.overrideOf(route, app, key)
	if err != nil {
		return http.StatusBadRequest, err
	}
	if err := s.gw.router().backend.limiter.ResetOverride(r.Context(), o.Family, o.Name, o.Key); err != nil {
		return http.StatusBadGateway, err
	}
	s.forgetSummary()
	s.log.Info("keycap: override reset", "family", o.Family.String(), "name", o.Name, "key", s.logKey(o),
		"by", by, "remote", r.RemoteAddr)
	return 0, nil
}

// overrideOf names the override of a route's or an app's key: a route's
// key as its requests build it (overrideKey).
func (s *Server) overrideOf(route, app, key string) (keycap.Override, error) {
	rt := s.gw.router()
	cfg := rt.cfg
	switch {
	case (route == "") == (app == ""):
		return keycap.Override{}, errors.New("name either a route or a Pusher app")
	case route != "":
		i := slices.IndexFunc(cfg.Routes, func(r RouteConfig) bool { return r.Name == route })
		if i < 0 {
			return keycap.Override{}, fmt.Errorf("no route %q", route)
		}
		k, err := overrideKey(&cfg.Routes[i], rt.cip, key)
		if err != nil {
			return keycap.Override{}, err
		}
		return keycap.Override{Family: keycap.FamilyApp, Name: cfg.Routes[i].Pool, Key: k}, nil
	case !hasApp(cfg, app):
		return keycap.Override{}, fmt.Errorf("no Pusher app %q", app)
	case strings.TrimSpace(key) == "":
		return keycap.Override{}, errors.New("no key: a Pusher app's key is the user's id")
	}
	return keycap.Override{Family: keycap.FamilyConn, Name: app, Key: key}, nil
}

// logKey is an override's key as the log shows it: in clear, or with
// admin_api.hash_keys as its pool's hash (a key may be personal data).
func (s *Server) logKey(o keycap.Override) string {
	if s.gw.router().cfg.AdminAPI.HashKeys {
		return "#" + store.PoolOf(byte(o.Family), o.Name, o.Key).String()
	}
	return o.Key
}
