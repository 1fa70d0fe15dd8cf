package gateway

import (
	"context"
	"crypto/subtle"
	"fmt"
	"html/template"
	"net/http"
	"time"
)

// PageRefresh is how often the admin page reloads itself.
const PageRefresh = 2 * time.Second

// The admin page: server-rendered, no script, no build step. It reloads
// itself every PageRefresh. Every figure a test reads carries data-* names.
var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"secs": func(f float64) string { return fmt.Sprintf("%.1fs", f) },
	"rate": func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"maxOf": func(n int) string {
		if n < 0 {
			return "?"
		}
		return fmt.Sprint(n)
	},
	"deref": func(p *int) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprint(*p)
	},
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>keycap · {{.S.Node}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; }
h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.05em; margin: 1.6em 0 .4em; }
.sub { color: #667; margin-bottom: 1em; }
table { border-collapse: collapse; min-width: 40em; }
th, td { text-align: left; padding: .3em .8em; border-bottom: 1px solid #e3e6ec; vertical-align: top; }
th { background: #f4f6f9; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.full { color: #b42318; font-weight: 600; } .shadow { color: #6941c6; }
.keys { font-family: ui-monospace, monospace; font-size: 12px; }
.problem { color: #b42318; }
.empty { color: #889; }
</style>
</head>
<body>
<h1>keycap gateway</h1>
<div class="sub">node <b data-field="node">{{.S.Node}}</b> · {{.S.At.Format "2006-01-02 15:04:05 UTC"}} · refreshes every {{.Refresh}}s</div>
{{range .S.Problems}}<p class="problem" data-field="problem">{{.}}</p>{{end}}

<h2>Requests in flight, per route</h2>
<table data-table="limits">
<tr><th>pool</th><th>routes</th><th>max per key</th><th>keys</th><th>slots in use</th><th>waiting</th><th>refusals/s</th><th>busiest keys (held / max)</th></tr>
{{range .S.Limits}}
<tr data-pool="{{.Pool}}" data-shadow="{{.Shadow}}">
<td>{{.Pool}}{{if .Shadow}} <span class="shadow">shadow</span>{{end}}</td>
<td>{{range $i, $r := .Routes}}{{if $i}}, {{end}}{{$r}}{{end}}</td>
<td class="n" data-field="max">{{.Max}}</td>
<td class="n" data-field="keys">{{.Keys}}</td>
<td class="n" data-field="in_use">{{.InUse}}</td>
<td class="n" data-field="waiting">{{.Waiting}}</td>
<td class="n" data-field="refusals_per_second">{{rate .PerSecond}}</td>
<td class="keys">{{range .Busiest}}<div data-key="{{.Key}}"{{if and (ge .Max 0) (ge .Held .Max)}} class="full"{{end}}><span data-field="key">{{.Key}}</span> <span data-field="held">{{.Held}}</span> / <span data-field="key_max">{{maxOf .Max}}</span>{{if .Waiting}} · {{.Waiting}} waiting{{end}}{{if .Overridden}} · overridden{{end}}</div>{{else}}<span class="empty">idle</span>{{end}}{{if .Truncated}}<div class="empty">more keys than shown</div>{{end}}</td>
</tr>
{{else}}<tr><td colspan="8" class="empty">no routes with limits</td></tr>{{end}}
</table>

{{if .S.Apps}}
<h2>WebSocket connections, per Pusher app</h2>
<table data-table="apps">
<tr><th>app</th><th>cap per user</th><th>users</th><th>connections</th><th>busiest users (connections / cap)</th></tr>
{{range .S.Apps}}
<tr data-app="{{.App}}">
<td>{{.App}}</td>
<td class="n" data-field="cap">{{.Cap}}</td>
<td class="n" data-field="users">{{.Users}}</td>
<td class="n" data-field="connections">{{.Connections}}</td>
<td class="keys">{{range .Busiest}}<div data-key="{{.Key}}"{{if and (ge .Max 0) (ge .Held .Max)}} class="full"{{end}}>{{.Key}} <span data-field="held">{{.Held}}</span> / {{maxOf .Max}}</div>{{else}}<span class="empty">none</span>{{end}}</td>
</tr>
{{end}}
</table>
{{end}}

<h2>Paused APIs</h2>
<table data-table="pauses">
<tr><th>API (hash)</th><th>kind</th><th>time left</th></tr>
{{range .S.Pauses}}<tr data-pause="{{.ID}}"><td class="keys">{{.ID}}</td><td>{{if .Pace}}pace{{else}}pause{{end}}</td><td class="n" data-field="left">{{secs .Left}}</td></tr>
{{else}}<tr><td colspan="3" class="empty">none</td></tr>{{end}}
</table>

<h2>Overrides</h2>
<table data-table="overrides">
<tr><th>family</th><th>name</th><th>key</th><th>max</th><th>share</th><th>expires in</th></tr>
{{range .S.Overrides}}<tr data-override="{{.Name}} {{.Key}}"><td>{{.Family}}</td><td>{{.Name}}</td><td class="keys">{{.Key}}</td><td class="n" data-field="max">{{deref .Max}}</td><td class="n">{{if .Share}}{{.Share}}{{else}}—{{end}}</td><td class="n">{{if .TTL}}{{secs .TTL}}{{else}}never{{end}}</td></tr>
{{else}}<tr><td colspan="6" class="empty">none</td></tr>{{end}}
</table>
</body>
</html>
`))

var loginTemplate = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>keycap · sign in</title>
<style>body { font: 14px system-ui, sans-serif; margin: 3em; } input { font: inherit; padding: .3em; }</style></head>
<body><h1>keycap admin</h1>
{{if .}}<p style="color:#b42318">{{.}}</p>{{end}}
<form method="post" action="/admin/login">
<label>Admin token <input type="password" name="token" autocomplete="current-password" autofocus></label>
<button type="submit">Sign in</button>
</form></body></html>
`))

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	data := struct {
		S       Summary
		Refresh int
	}{s.cachedSummary(ctx), int(PageRefresh / time.Second)}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	if err := pageTemplate.Execute(w, data); err != nil {
		s.log.Error("keycap: admin page", "error", err)
	}
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	if s.token() == "" {
		adminOff(w, true)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	_ = loginTemplate.Execute(w, "")
}

// login exchanges the token typed in the form for a cookie that the page
// accepts (HttpOnly, SameSite=Strict, on /admin/ only). The API takes only
// the bearer header, so a cookie can never change an override.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	want := s.token()
	if want == "" {
		http.NotFound(w, r)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	got := r.PostFormValue("token")
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_ = loginTemplate.Execute(w, "That is not the admin token.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: adminCookie, Value: cookieValue(want), Path: "/admin/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int((12 * time.Hour).Seconds())})
	http.Redirect(w, r, "/admin/", http.StatusSeeOther)
}
