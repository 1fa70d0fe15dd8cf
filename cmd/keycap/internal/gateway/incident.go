package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/store"
)

// The incident page (docs/gateway.md, "The admin API and page"): the
// store's figures now (Summary) beside this gateway's last 15 minutes
// (History), a page per key with its holders, and overrides set and reset
// from the page.
//
//	GET  /admin/                 the page; ?route= &q= &sort= &n= &refresh=0
//	GET  /admin/key              one key: ?route=api&key=header:X-User=alice (or ?app=&key=)
//	POST /admin/override         the page's forms: set or reset an override (CSRF token)
//	GET  /admin/api/history      the history, as JSON; the page's query parameters
//	GET  /admin/api/key          one key's pools, holders and history, as JSON

// PageRefresh is how often the admin page reloads itself (unless
// ?refresh=0): once per point of its charts.
const PageRefresh = HistoryStep

// pageCSP is the Content-Security-Policy of the admin pages: no script, no
// outside resource, forms to the gateway only, never in a frame.
const pageCSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"

// csrfToken is the token the page's forms carry: derived from the admin
// token, so a page from elsewhere cannot know it. With the cookie's
// SameSite=Strict and net/http's CrossOriginProtection, a form posted from
// another site fails three times over.
func csrfToken(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("keycap admin form"))
	return hex.EncodeToString(m.Sum(nil))
}

// historyQuery reads the page's query parameters.
func historyQuery(cfg *Config, v url.Values) (HistoryQuery, error) {
	q := HistoryQuery{Route: v.Get("route"), Search: strings.TrimSpace(v.Get("q")), Sort: v.Get("sort"), Hash: cfg.AdminAPI.HashKeys}
	if len(q.Search) > 200 {
		return q, fmt.Errorf("search: at most 200 bytes")
	}
	if q.Sort != "" && !slices.Contains(Sorts, q.Sort) {
		return q, fmt.Errorf("sort %q: one of %s", q.Sort, strings.Join(Sorts, ", "))
	}
	if n := v.Get("n"); n != "" {
		i, err := strconv.Atoi(n)
		if err != nil || i < 1 || i > 1000 {
			return q, fmt.Errorf("n %q: from 1 to 1000 keys per limit", n)
		}
		q.N = i
	}
	if q.Route != "" {
		pool, ok := poolOf(cfg, q.Route)
		if !ok {
			return q, fmt.Errorf("no route %q", q.Route)
		}
		q.pools = map[string]bool{pool: true}
	}
	return q, nil
}

func (s *Server) apiHistory(w http.ResponseWriter, r *http.Request) {
	rt := s.gw.router()
	q, err := historyQuery(rt.cfg, r.URL.Query())
	if err != nil {
		adminError(w, http.StatusBadRequest, err.Error())
		return
	}
	h := s.gw.history.view(q)
	h.Node = frontdoor.Node(rt.backend.limiter)
	writeJSON(w, h)
}

// clearKey returns the key a pool's hash ("#…", admin_api.hash_keys) stands
// for among the keys of the route's (or the app's) pool that this gateway's
// history or an override knows; a key in clear as it is. hashed says the
// key was given as a hash: an error about it must then not name the key.
func (s *Server) clearKey(ctx context.Context, route, app, key string) (plain string, hashed bool, err error) {
	hash, ok := strings.CutPrefix(key, "#")
	if !ok {
		return key, false, nil
	}
	var id store.PoolID
	b, err := hex.DecodeString(hash)
	if err != nil || len(b) != len(id) {
		return "", true, fmt.Errorf("key %q: not a pool's hash (# and %d hex digits)", key, 2*len(id))
	}
	copy(id[:], b)
	rt := s.gw.router()
	family, name := keycap.FamilyConn, app
	if route != "" {
		pool, ok := poolOf(rt.cfg, route)
		if !ok {
			return "", true, fmt.Errorf("no route %q", route)
		}
		family, name = keycap.FamilyApp, pool
	}
	if k, ok := s.gw.history.keyOfPool(family, name, id); ok {
		return k, true, nil
	}
	if ovs, err := rt.backend.limiter.Overrides(ctx); err == nil {
		for _, o := range ovs {
			if o.Family == family && o.Name == name && o.Pool == id {
				return o.Key, true, nil
			}
		}
	}
	return "", true, fmt.Errorf("key %s: no key of %s that this gateway has seen has this hash; open it from the page of a gateway that served it, or give the key in clear", key, name)
}

// overrideOfShown is overrideOf for a key as the pages show it: in clear,
// or as its pool's hash, whose errors never name the key in clear.
func (s *Server) overrideOfShown(ctx context.Context, route, app, key string) (keycap.Override, error) {
	plain, hashed, err := s.clearKey(ctx, route, app, key)
	if err != nil {
		return keycap.Override{}, err
	}
	o, err := s.overrideOf(route, app, plain)
	if err != nil && hashed {
		return o, fmt.Errorf("key %s: not a key of route %q's limits", key, route)
	}
	return o, err
}

// pageLimit is one limit on the page: the store's figures and this
// gateway's history.
type pageLimit struct {
	LimitSummary
	Route        string // the first route of the pool: the key pages' links
	Chart        markup
	KeyRows      []pageKey
	KeysSeen     int
	KeysDropped  int64
	RefusedTotal int
}

// pageKey is one key of a limit's table.
type pageKey struct {
	KeyHistory
	Held, Max int // from the store now; Max -1: unknown
	Link      string
}

type pageRoute struct {
	RouteHistory
	Chart                               markup
	Requests, Refused, Failed, Upstream int
}

type pageData struct {
	S       Summary
	Q       HistoryQuery
	Routes  []string
	Limits  []pageLimit
	Traffic []pageRoute
	Sorts   []string
	CSRF    string
	Refresh int // seconds; 0: off
	Done    string
	Off     bool
	Window  string
	// PoolRoute names a route of each pool: an override's reset form
	// names its key by route.
	PoolRoute map[string]string
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rt := s.gw.router()
	q, err := historyQuery(rt.cfg, r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d := pageData{S: s.cachedSummary(ctx), Q: q, Sorts: Sorts, CSRF: csrfToken(s.token()),
		Refresh: int(PageRefresh / time.Second), Done: r.URL.Query().Get("done"), Window: fmt.Sprintf("%d minutes", int(HistoryWindow/time.Minute))}
	if r.URL.Query().Get("refresh") == "0" {
		d.Refresh = 0
	}
	d.PoolRoute = map[string]string{}
	for _, rc := range rt.cfg.Routes {
		d.Routes = append(d.Routes, rc.Name)
		if _, ok := d.PoolRoute[rc.Pool]; !ok {
			d.PoolRoute[rc.Pool] = rc.Name
		}
	}
	h := s.gw.history.view(q)
	d.Off = h.Off
	d.Limits, d.Traffic = s.joinHistory(rt.cfg, d.S, h, q)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", pageCSP)
	_, _ = io.WriteString(w, incidentPage(d))
}

// joinHistory puts each limit's figures now beside its history.
func (s *Server) joinHistory(cfg *Config, sum Summary, h History, q HistoryQuery) ([]pageLimit, []pageRoute) {
	var limits []pageLimit
	for _, ls := range sum.Limits {
		if q.pools != nil && !q.pools[ls.Pool] {
			continue
		}
		pl := pageLimit{LimitSummary: ls, Route: ls.Routes[0]}
		live := map[string]KeyUsage{}
		for _, u := range ls.Busiest {
			live[u.Key] = u
		}
		i := slices.IndexFunc(h.Limits, func(lh LimitHistory) bool {
			return lh.Family == keycap.FamilyApp.String() && lh.Pool == ls.Pool && lh.Source == ls.Source && lh.Shadow == ls.Shadow
		})
		if i >= 0 {
			lh := h.Limits[i]
			pl.KeysSeen, pl.KeysDropped, pl.RefusedTotal = lh.KeysSeen, lh.KeysDropped, lh.RefusedTotal
			pl.Chart = chart(fmt.Sprintf("%s %s: slots in use, waiting and refused over the last %d minutes", ls.Pool, ls.Source, int(HistoryWindow/time.Minute)),
				chartSeries{name: "in use", color: "#2563eb", points: floats(lh.InUse)},
				chartSeries{name: "waiting", color: "#d97706", points: lh.Waiting},
				chartSeries{name: "refused per 5 s", color: "#b42318", bars: true, points: floats(lh.Refused)})
			for _, k := range lh.Keys {
				pk := pageKey{KeyHistory: k, Held: -1, Max: -1, Link: keyLink(pl.Route, k.Key)}
				if u, ok := live[k.Key]; ok {
					pk.Held, pk.Max = u.Held, u.Max
				}
				pl.KeyRows = append(pl.KeyRows, pk)
			}
		}
		limits = append(limits, pl)
	}
	var routes []pageRoute
	for _, rh := range h.Routes {
		pr := pageRoute{RouteHistory: rh}
		for i := range rh.Requests {
			pr.Requests += rh.Requests[i]
			pr.Refused += rh.Refused[i]
			pr.Failed += rh.Failed[i]
			pr.Upstream += rh.Upstream[i]
		}
		pr.Chart = chart(fmt.Sprintf("route %s: requests per 5 s over the last %d minutes", rh.Route, int(HistoryWindow/time.Minute)),
			chartSeries{name: "requests", color: "#2563eb", points: floats(rh.Requests)},
			chartSeries{name: "refused", color: "#b42318", points: floats(rh.Refused)},
			chartSeries{name: "502/503/504", color: "#7a2e0e", points: floats(rh.Failed)},
			chartSeries{name: "upstream 5xx", color: "#9333ea", points: floats(rh.Upstream)})
		routes = append(routes, pr)
	}
	return limits, routes
}

// keyLink is the address of a key's page.
func keyLink(route, key string) string {
	return "/admin/key?" + url.Values{"route": {route}, "key": {key}}.Encode()
}

// KeyReport is one key: GET /admin/api/key and the key's page.
type KeyReport struct {
	Route   string       `json:"route,omitempty"`
	App     string       `json:"app,omitempty"`
	Key     string       `json:"key"` // as given, normalised
	Pools   []KeyPool    `json:"pools"`
	History []KeyHistory `json:"history"` // per limit of the route that has the key's source: its last 15 minutes here
}

// KeyPool is the key's pool in one limit (real or shadow), from the store.
type KeyPool struct {
	Pool     string        `json:"pool"`
	Shadow   bool          `json:"shadow"`
	Max      int           `json:"max"` // with its override; -1 unknown
	Held     int           `json:"held"`
	Holders  []HolderView  `json:"holders"`
	Waiting  []WaiterView  `json:"waiting"`
	Override *OverrideView `json:"override,omitempty"`
	// Truncated: the limit has more pools than a reading covers (1,000):
	// the key's may be among those not read.
	Truncated bool `json:"truncated,omitempty"`
}

// keyReport reads one key of a route (or an app): its pools' holders, from
// the store, and its history here. key may be a pool's hash ("#…") that
// this gateway's history or an override knows.
func (s *Server) keyReport(ctx context.Context, route, app, key string) (KeyReport, int, error) {
	rt := s.gw.router()
	o, err := s.overrideOfShown(ctx, route, app, key)
	if err != nil {
		return KeyReport{}, http.StatusBadRequest, err
	}
	hash := rt.cfg.AdminAPI.HashKeys
	rep := KeyReport{Route: route, App: app, Key: o.Key, Pools: []KeyPool{}, History: []KeyHistory{}}
	if hash {
		rep.Key = "#" + store.PoolOf(byte(o.Family), o.Name, o.Key).String()
	}
	lim := rt.backend.limiter
	ovs, _ := lim.Overrides(ctx)
	var ov *OverrideView
	for _, v := range overrideViews(ovs, true) {
		if v.Family == o.Family.String() && v.Name == o.Name && v.Key == o.Key {
			v.Key = rep.Key
			ov = &v
		}
	}
	for _, shadow := range []bool{false, true} {
		limitMax := -1
		if o.Family == keycap.FamilyConn {
			if shadow {
				continue
			}
			if rt.backend.caps != nil {
				limitMax = lim.Overridden(connLimit(app, o.Key, rt.backend.caps.CapOf(app))).Max()
			}
		} else {
			u := KeyUsage{Max: -1}
			s.usage(rt, o.Name, shadow, o.Key, &u)
			if u.Max < 0 {
				continue // no limit of that kind reads the key
			}
			limitMax = u.Max
		}
		pool := keycap.Spec{Name: o.Name, Max: 1, Family: o.Family, Shadow: shadow}.For(o.Key).Pool()
		kp := KeyPool{Pool: o.Name, Shadow: shadow, Max: limitMax, Holders: []HolderView{}, Waiting: []WaiterView{}, Override: ov}
		reports, _, truncated, err := inspectAll(ctx, lim, keycap.Inspection{Family: o.Family, Name: o.Name, Shadow: shadow})
		if err != nil {
			return rep, http.StatusBadGateway, err
		}
		kp.Truncated = truncated
		for _, p := range reports {
			if p.Pool == pool {
				pv := poolView(p, !hash)
				kp.Held, kp.Holders, kp.Waiting = pv.Held, pv.Holders, pv.Waiting
			}
		}
		rep.Pools = append(rep.Pools, kp)
	}
	rep.History = append(rep.History, s.gw.history.keyRows(o.Family, o.Name, o.Key, hash)...)
	return rep, 0, nil
}

func (s *Server) apiKey(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rep, status, err := s.keyReport(ctx, q.Get("route"), q.Get("app"), q.Get("key"))
	if err != nil {
		adminError(w, status, err.Error())
		return
	}
	writeJSON(w, rep)
}

func (s *Server) keyPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	d := keyPageData{CSRF: csrfToken(s.token()), Done: q.Get("done"), Raw: q.Get("key")}
	rep, status, err := s.keyReport(ctx, q.Get("route"), q.Get("app"), q.Get("key"))
	d.R = rep
	d.R.Route, d.R.App = q.Get("route"), q.Get("app")
	back := r.URL.Query()
	back.Del("done")
	d.Back = "/admin/key?" + back.Encode()
	if err != nil {
		d.Err = err.Error()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", pageCSP)
		w.WriteHeader(status)
	} else {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", pageCSP)
	}
	_, _ = io.WriteString(w, keyPageHTML(d))
}

// maxFormBody bounds a form the page posts.
const maxFormBody = 16 << 10

// pageOverride serves the page's forms: set or reset an override, then back
// to the page the form was on, saying what was done (or what was wrong).
func (s *Server) pageOverride(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "invalid form: "+err.Error(), http.StatusBadRequest)
		return
	}
	f := r.PostForm
	if subtle.ConstantTimeCompare([]byte(f.Get("csrf")), []byte(csrfToken(s.token()))) != 1 {
		http.Error(w, "the form's token is not this gateway's: reload the page and try again", http.StatusForbidden)
		return
	}
	// Back to the page the form was on: a path of the admin pages only.
	back, perr := url.Parse(f.Get("back"))
	if perr != nil || back.Scheme != "" || back.Host != "" || back.User != nil ||
		(back.Path != "/admin/" && back.Path != "/admin/key") {
		back = &url.URL{Path: "/admin/"}
	}
	shown := f.Get("key")
	key, hashed, err := s.clearKey(r.Context(), f.Get("route"), f.Get("app"), shown)
	var done string
	switch action := f.Get("action"); {
	case err != nil:
	case action == "set":
		req := OverrideRequest{Route: f.Get("route"), App: f.Get("app"), Key: key, TTL: strings.TrimSpace(f.Get("ttl"))}
		if m := strings.TrimSpace(f.Get("max")); m != "" {
			n, perr := strconv.Atoi(m)
			if perr != nil {
				err = fmt.Errorf("max %q: a whole number", m)
			}
			req.Max = &n
		}
		if sh := strings.TrimSpace(f.Get("share")); sh != "" && err == nil {
			if req.Share, err = strconv.Atoi(sh); err != nil {
				err = fmt.Errorf("share %q: a whole number", sh)
			}
		}
		if err == nil {
			_, err = s.setOverride(r, req, "page")
		}
		done = "override set"
	case action == "reset":
		_, err = s.resetOverride(r, f.Get("route"), f.Get("app"), key, "page")
		done = "override reset: the configuration's values apply"
	default:
		err = fmt.Errorf("unknown action %q: set or reset", action)
	}
	if err != nil {
		msg := err.Error()
		if hashed { // the key was given as its hash: never name it in clear
			msg = strings.ReplaceAll(strings.ReplaceAll(msg, strconv.Quote(key), shown), key, shown)
		}
		done = "not done: " + msg
	}
	q := back.Query()
	q.Set("done", done)
	http.Redirect(w, r, (&url.URL{Path: back.Path, RawQuery: q.Encode()}).String(), http.StatusSeeOther)
}

// The pages' formats.

func secs(f float64) string { return fmt.Sprintf("%.1fs", f) }

func perSecond(f float64) string { return fmt.Sprintf("%.1f", f) }

// maxOf is a key's max, "?" when unknown (-1).
func maxOf(n int) string {
	if n < 0 {
		return "?"
	}
	return strconv.Itoa(n)
}

func deref(p *int) string {
	if p == nil {
		return "—"
	}
	return strconv.Itoa(*p)
}

func ago(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return time.Since(*t).Round(time.Second).String() + " ago"
}

func dur(secs float64) string {
	return (time.Duration(secs * float64(time.Second))).Round(100 * time.Millisecond).String()
}

// source names a limit's keys.
func source(s string) string {
	if s == "" {
		return "keys not seen here"
	}
	return s
}

func appLink(app, user string) string {
	return "/admin/key?" + url.Values{"app": {app}, "key": {user}}.Encode()
}

// sortLink is the page's address with q, sorted by sort, refreshing or
// not.
func sortLink(q HistoryQuery, sort string, refresh int) string {
	v := url.Values{"sort": {sort}}
	if q.Route != "" {
		v.Set("route", q.Route)
	}
	if q.Search != "" {
		v.Set("q", q.Search)
	}
	if q.N != 0 {
		v.Set("n", strconv.Itoa(q.N))
	}
	if refresh == 0 {
		v.Set("refresh", "0")
	}
	return "/admin/?" + v.Encode()
}

const pageStyle = `<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; }
h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.05em; margin: 1.6em 0 .4em; } h3 { font-size: 1em; margin: 1.2em 0 .3em; }
.sub { color: #667; margin-bottom: 1em; }
table { border-collapse: collapse; min-width: 40em; }
th, td { text-align: left; padding: .3em .8em; border-bottom: 1px solid #e3e6ec; vertical-align: top; }
th { background: #f4f6f9; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.full { color: #b42318; font-weight: 600; } .shadow { color: #6941c6; }
.keys, .key { font-family: ui-monospace, monospace; font-size: 12px; }
.problem, .err { color: #b42318; } .done { color: #067647; }
.empty { color: #889; }
.limit { border-top: 2px solid #e3e6ec; margin-top: 1.4em; padding-top: .4em; }
.figs span { margin-right: 1.4em; } .figs b { font-variant-numeric: tabular-nums; }
form.inline { display: inline; } input, select, button { font: inherit; }
a { color: #1d4ed8; }
</style>`

// incidentPage writes the page.
func incidentPage(d pageData) string {
	var p htmlPage
	p.s("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	if d.Refresh != 0 {
		p.f(`<meta http-equiv="refresh" content="%v">`, d.Refresh)
	}
	p.f("\n<title>keycap · %v</title>\n", d.S.Node)
	p.s(pageStyle + "\n</head>\n<body>\n<h1>keycap gateway</h1>\n")
	p.f(`<div class="sub">node <b data-field="node">%v</b> · %v ·`+"\n", d.S.Node, d.S.At.Format("2006-01-02 15:04:05 UTC"))
	if d.Refresh != 0 {
		p.f(`refreshes every %vs (<a href="%v">stop</a>)`, d.Refresh, sortLink(d.Q, d.Q.Sort, 0))
	} else {
		p.f(`not refreshing (<a href="%v">refresh</a>)`, sortLink(d.Q, d.Q.Sort, 5))
	}
	p.s("</div>\n")
	if d.Done != "" {
		p.f(`<p class="done" data-field="done">%v</p>`+"\n", d.Done)
	}
	for _, problem := range d.S.Problems {
		p.f(`<p class="problem" data-field="problem">%v</p>`+"\n", problem)
	}
	if d.Off {
		p.s(`<p class="empty">The history is off (admin_api.history_keys: -1): the figures below are the store's, now.</p>` + "\n")
	}

	p.s("\n" + `<form method="get" action="/admin/" data-form="filter">` + "\n")
	p.s(`<label>route <select name="route"><option value="">every route</option>`)
	for _, r := range d.Routes {
		p.f(`<option%v>%v</option>`, when(r == d.Q.Route, " selected"), r)
	}
	p.s("</select></label>\n")
	p.f(`<label>key holds <input name="q" value="%v" size="24"></label>`+"\n", d.Q.Search)
	p.s(`<label>sort by <select name="sort">`)
	for _, sort := range d.Sorts {
		p.f(`<option%v>%v</option>`, when(sort == d.Q.Sort, " selected"), sort)
	}
	p.s("</select></label>\n")
	n := 10
	if d.Q.N != 0 {
		n = d.Q.N
	}
	p.f(`<label>keys per limit <input name="n" value="%v" size="4"></label>`+"\n", n)
	if d.Refresh == 0 {
		p.s(`<input type="hidden" name="refresh" value="0">` + "\n")
	}
	p.s("<button type=\"submit\">show</button>\n</form>\n\n")

	p.f("<h2>Requests per route, last %v (this gateway)</h2>\n", d.Window)
	p.s(`<table data-table="routes">` + "\n")
	p.s("<tr><th>route</th><th>requests</th><th>refused (429)</th><th>502/503/504</th><th>upstream 5xx</th><th>per 5 s</th></tr>\n")
	for _, t := range d.Traffic {
		p.f(`<tr data-route="%v"><td>%v</td><td class="n" data-field="requests">%v</td><td class="n" data-field="refused">%v</td><td class="n" data-field="failed">%v</td><td class="n" data-field="upstream">%v</td><td>%v</td></tr>`+"\n",
			t.Route, t.Route, t.Requests, t.Refused, t.Failed, t.Upstream, t.Chart)
	}
	if len(d.Traffic) == 0 {
		p.s(`<tr><td colspan="6" class="empty">no requests yet</td></tr>` + "\n")
	}
	p.s("</table>\n\n<h2>Limits</h2>\n")
	p.f(`<p class="sub">Now: the store's figures, every gateway's holders. Charts and key tables: this gateway's last %v.</p>`+"\n", d.Window)
	p.s(`<table data-table="limits">` + "\n")
	p.s("<tr><th>pool</th><th>key</th><th>routes</th><th>max per key</th><th>keys</th><th>slots in use</th><th>waiting</th><th>at cap</th><th>refusals/s</th><th>busiest keys now (held / max)</th></tr>\n")
	for _, l := range d.Limits {
		p.f(`<tr data-pool="%v" data-source="%v" data-shadow="%v">`+"\n", l.Pool, l.Source, l.Shadow)
		p.f("<td>%v%v</td>\n", l.Pool, when(l.Shadow, ` <span class="shadow">shadow</span>`))
		p.f("<td>%v</td>\n<td>%v</td>\n", source(l.Source), strings.Join(l.Routes, ", "))
		p.f(`<td class="n" data-field="max">%v</td>`+"\n", l.Max)
		p.f(`<td class="n" data-field="keys">%v</td>`+"\n", l.Keys)
		p.f(`<td class="n" data-field="in_use">%v</td>`+"\n", l.InUse)
		p.f(`<td class="n" data-field="waiting">%v</td>`+"\n", l.Waiting)
		p.f(`<td class="n" data-field="at_cap">%v</td>`+"\n", l.AtCap)
		p.f(`<td class="n" data-field="refusals_per_second">%v</td>`+"\n", perSecond(l.PerSecond))
		p.s(`<td class="keys">`)
		for _, k := range l.Busiest {
			p.f(`<div data-key="%v"%v><a href="%v" data-field="key">%v</a> <span data-field="held">%v</span> / <span data-field="key_max">%v</span>%v%v</div>`,
				k.Key, when(k.Max >= 0 && k.Held >= k.Max, ` class="full"`), keyLink(l.Route, k.Key), k.Key, k.Held, maxOf(k.Max),
				when(k.Waiting != 0, markup(fmt.Sprintf(" · %d waiting", k.Waiting))), when(k.Overridden, " · overridden"))
		}
		if len(l.Busiest) == 0 {
			p.s(`<span class="empty">idle</span>`)
		}
		if l.Truncated {
			p.s(`<div class="empty">more keys than shown</div>`)
		}
		p.s("</td>\n</tr>\n")
	}
	if len(d.Limits) == 0 {
		p.s(`<tr><td colspan="10" class="empty">no routes with limits</td></tr>` + "\n")
	}
	p.s("</table>\n\n")

	for _, l := range d.Limits {
		if l.Chart == "" {
			continue
		}
		p.f(`<div class="limit" data-history="%v %v%v">`+"\n", l.Pool, l.Source, when(l.Shadow, " shadow"))
		p.f("<h3>%v · %v%v</h3>\n", l.Pool, source(l.Source), when(l.Shadow, ` <span class="shadow">shadow</span>`))
		p.f(`<div class="figs"><span>refused in %v: <b data-field="refused_total">%v</b></span><span>keys seen: <b>%v</b></span>`, d.Window, l.RefusedTotal, l.KeysSeen)
		if l.KeysDropped != 0 {
			p.f(`<span>keys let go (table full): <b>%v</b></span>`, l.KeysDropped)
		}
		p.f("</div>\n%v\n", l.Chart)
		p.s(`<table data-table="keys">` + "\n")
		p.f(`<tr><th><a href="%v">key</a></th><th><a href="%v">refused</a></th><th><a href="%v">last refused</a></th><th><a href="%v">slot-time</a></th><th>held now / max</th></tr>`+"\n",
			sortLink(d.Q, "key", d.Refresh), sortLink(d.Q, "refused", d.Refresh), sortLink(d.Q, "last", d.Refresh), sortLink(d.Q, "slot", d.Refresh))
		for _, k := range l.KeyRows {
			held := "—"
			if k.Held >= 0 {
				held = fmt.Sprintf("%d / %s", k.Held, maxOf(k.Max))
			}
			p.f(`<tr data-key="%v"><td class="key"><a href="%v">%v</a></td><td class="n" data-field="refused">%v</td><td>%v</td><td class="n" data-field="slot">%v</td><td class="n">%v</td></tr>`+"\n",
				k.Key, k.Link, k.Key, k.Refused, ago(k.LastRefused), dur(k.SlotSeconds), held)
		}
		if len(l.KeyRows) == 0 {
			p.s(`<tr><td colspan="5" class="empty">no key refused or released`)
			if d.Q.Search != "" {
				p.f(" matching “%v”", d.Q.Search)
			}
			p.s("</td></tr>\n")
		}
		p.s("</table>\n</div>\n")
	}

	if len(d.S.Apps) != 0 {
		p.s("\n<h2>WebSocket connections, per Pusher app</h2>\n" + `<table data-table="apps">` + "\n")
		p.s("<tr><th>app</th><th>cap per user</th><th>users</th><th>connections</th><th>busiest users (connections / cap)</th></tr>\n")
		for _, a := range d.S.Apps {
			p.f(`<tr data-app="%v">`+"\n<td>%v</td>\n", a.App, a.App)
			p.f(`<td class="n" data-field="cap">%v</td>`+"\n", a.Cap)
			p.f(`<td class="n" data-field="users">%v</td>`+"\n", a.Users)
			p.f(`<td class="n" data-field="connections">%v</td>`+"\n", a.Connections)
			p.s(`<td class="keys">`)
			for _, k := range a.Busiest {
				p.f(`<div data-key="%v"%v><a href="%v">%v</a> <span data-field="held">%v</span> / %v</div>`,
					k.Key, when(k.Max >= 0 && k.Held >= k.Max, ` class="full"`), appLink(a.App, k.Key), k.Key, k.Held, maxOf(k.Max))
			}
			if len(a.Busiest) == 0 {
				p.s(`<span class="empty">none</span>`)
			}
			p.s("</td>\n</tr>\n")
		}
		p.s("</table>\n")
	}

	if len(d.S.Totals) != 0 {
		p.s("\n<h2>Adaptive totals</h2>\n" + `<table data-table="totals">` + "\n")
		p.s("<tr><th>parent</th><th>total</th><th>floor – ceiling</th><th>why</th><th>latency</th><th>no-load</th><th>in flight</th><th>done / overloads</th></tr>\n")
		for _, t := range d.S.Totals {
			p.f(`<tr data-total="%v"><td>%v%v</td><td class="n" data-field="total">%v</td><td class="n">%v – %v</td><td data-field="reason">%v</td><td class="n">%v</td><td class="n">%v</td><td class="n">%v</td><td class="n">%v / %v</td></tr>`+"\n",
				t.Parent, t.Parent, when(t.Shadow, " (shadow)"), t.Total, t.Floor, t.Ceiling, t.Reason, secs(t.Latency), secs(t.Baseline), fmt.Sprintf("%.1f", t.InFlight), t.Completed, t.Overloads)
		}
		p.s("</table>\n")
	}

	p.s("\n<h2>Paused APIs</h2>\n" + `<table data-table="pauses">` + "\n<tr><th>API (hash)</th><th>kind</th><th>time left</th></tr>\n")
	for _, ps := range d.S.Pauses {
		kind := "pause"
		if ps.Pace {
			kind = "pace"
		}
		p.f(`<tr data-pause="%v"><td class="keys">%v</td><td>%v</td><td class="n" data-field="left">%v</td></tr>`+"\n", ps.ID, ps.ID, kind, secs(ps.Left))
	}
	if len(d.S.Pauses) == 0 {
		p.s(`<tr><td colspan="3" class="empty">none</td></tr>` + "\n")
	}
	p.s("</table>\n\n<h2>Overrides</h2>\n" + `<table data-table="overrides">` + "\n<tr><th>family</th><th>name</th><th>key</th><th>max</th><th>share</th><th>expires in</th><th></th></tr>\n")
	for _, o := range d.S.Overrides {
		share, ttl := "—", "never"
		if o.Share != 0 {
			share = strconv.Itoa(o.Share)
		}
		if o.TTL != 0 {
			ttl = secs(o.TTL)
		}
		p.f(`<tr data-override="%v %v"><td>%v</td><td>%v</td><td class="keys">%v</td><td class="n" data-field="max">%v</td><td class="n">%v</td><td class="n">%v</td>`+"\n",
			o.Name, o.Key, o.Family, o.Name, o.Key, deref(o.Max), share, ttl)
		route := d.PoolRoute[o.Name]
		switch {
		case o.Family == "conn":
			p.f(`<td><form class="inline" method="post" action="/admin/override" data-form="reset"><input type="hidden" name="csrf" value="%v"><input type="hidden" name="action" value="reset"><input type="hidden" name="key" value="%v"><input type="hidden" name="app" value="%v"><input type="hidden" name="back" value="/admin/"><button type="submit">reset</button></form></td></tr>`+"\n",
				d.CSRF, o.Key, o.Name)
		case route != "":
			p.f(`<td><form class="inline" method="post" action="/admin/override" data-form="reset"><input type="hidden" name="csrf" value="%v"><input type="hidden" name="action" value="reset"><input type="hidden" name="key" value="%v"><input type="hidden" name="route" value="%v"><input type="hidden" name="back" value="/admin/"><button type="submit">reset</button></form></td></tr>`+"\n",
				d.CSRF, o.Key, route)
		default:
			p.s(`<td><span class="empty" title="no route of this configuration counts in this pool">keycap override reset</span></td></tr>` + "\n")
		}
	}
	if len(d.S.Overrides) == 0 {
		p.s(`<tr><td colspan="7" class="empty">none</td></tr>` + "\n")
	}
	p.s("</table>\n" + `<p class="sub">To set one, open a key (every key above links to its page).</p>` + "\n</body>\n</html>\n")
	return p.b.String()
}

// keyPageData is what a key's page shows.
type keyPageData struct {
	R    KeyReport
	Err  string
	CSRF string
	Back string
	Done string
	Raw  string
}

// keyPageHTML writes a key's page.
func keyPageHTML(d keyPageData) string {
	var p htmlPage
	key := d.R.Key
	if key == "" {
		key = d.Raw
	}
	p.f("<!doctype html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>keycap · %v</title>\n", d.R.Key)
	p.s(pageStyle + "\n</head>\n<body>\n" + `<p><a href="/admin/">← the page</a></p>` + "\n")
	if d.R.Route != "" {
		p.f("<h1>route %v", d.R.Route)
	} else {
		p.f("<h1>app %v", d.R.App)
	}
	p.f(` · <span class="key" data-field="key">%v</span></h1>`+"\n", key)
	if d.Done != "" {
		p.f(`<p class="done" data-field="done">%v</p>`+"\n", d.Done)
	}
	if d.Err != "" {
		p.f(`<p class="err" data-field="error">%v</p>`+"\n", d.Err)
	}
	for _, kp := range d.R.Pools {
		p.f(`<h2>%v%v: <span data-field="held">%v</span> / <span data-field="max">%v</span> held%v</h2>`+"\n",
			kp.Pool, when(kp.Shadow, ` <span class="shadow">shadow</span>`), kp.Held, maxOf(kp.Max), when(kp.Override != nil, " (overridden)"))
		p.s(`<table data-table="holders">` + "\n<tr><th>holder</th><th>weight</th><th>age</th><th>expires in</th><th>gateway</th><th>request</th></tr>\n")
		for _, h := range kp.Holders {
			p.f(`<tr><td class="keys">%v</td><td class="n">%v</td><td class="n" data-field="age">%v</td><td class="n">%v</td><td>%v%v</td><td class="keys" data-field="label">%v</td></tr>`+"\n",
				h.Owner, h.Weight, secs(h.Age), secs(h.Expires), h.Node, when(h.Here, " (this one)"), h.Label)
		}
		if len(kp.Holders) == 0 {
			p.f(`<tr><td colspan="6" class="empty">no holder%v</td></tr>`+"\n", when(kp.Truncated, " found in the first 1,000 pools of the limit (it has more)"))
		}
		p.s("</table>\n")
		if len(kp.Waiting) != 0 {
			p.f("<p>%v waiting in line.</p>\n", len(kp.Waiting))
		}
	}
	if len(d.R.History) != 0 {
		p.s("<h2>Last 15 minutes here</h2>\n" + `<table data-table="history"><tr><th>limit</th><th>refused</th><th>last refused</th><th>slot-time</th></tr>` + "\n")
		for _, h := range d.R.History {
			p.f(`<tr><td>%v</td><td class="n" data-field="refused">%v</td><td>%v</td><td class="n">%v</td></tr>`, h.Limit, h.Refused, ago(h.LastRefused), dur(h.SlotSeconds))
		}
		p.s("\n</table>\n")
	}
	if d.R.Key != "" {
		target := `<input type="hidden" name="app" value="%v">`
		name := d.R.App
		if d.R.Route != "" {
			target, name = `<input type="hidden" name="route" value="%v">`, d.R.Route
		}
		p.s("<h2>Override</h2>\n" + `<form method="post" action="/admin/override" data-form="set">` + "\n")
		p.f(`<input type="hidden" name="csrf" value="%v"><input type="hidden" name="action" value="set">`+"\n", d.CSRF)
		p.f(`<input type="hidden" name="key" value="%v">`+target+"\n", d.R.Key, name)
		p.f(`<input type="hidden" name="back" value="%v">`+"\n", d.Back)
		p.s(`<label>max <input name="max" size="6"></label>` + "\n")
		if d.R.Route != "" {
			p.s(`<label>share <input name="share" size="6"></label>` + "\n")
		}
		p.s(`<label>for <input name="ttl" size="6" placeholder="1h"></label>` + "\n" + `<button type="submit">set</button>` + "\n</form>\n")
		p.s(`<form method="post" action="/admin/override" data-form="reset">` + "\n")
		p.f(`<input type="hidden" name="csrf" value="%v"><input type="hidden" name="action" value="reset">`+"\n", d.CSRF)
		p.f(`<input type="hidden" name="key" value="%v">`+target+"\n", d.R.Key, name)
		p.f(`<input type="hidden" name="back" value="%v">`+"\n", d.Back)
		p.s(`<button type="submit">reset to the configuration</button>` + "\n</form>\n")
		p.f(`<p class="sub">Every gateway of the store applies an override within admin_api.overrides_refresh. Each change is logged with the key%v.</p>`+"\n",
			when(strings.HasPrefix(d.R.Key, "#"), " (as its hash: admin_api.hash_keys)"))
	}
	p.s("</body>\n</html>\n")
	return p.b.String()
}
