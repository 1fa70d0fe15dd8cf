package gateway

import (
	"crypto/subtle"
	"io"
	"net/http"
	"time"
)

// loginPage is the sign-in form, with a problem to show above it ("":
// none).
func loginPage(problem string) string {
	var p htmlPage
	p.s(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>keycap · sign in</title>
<style>body { font: 14px system-ui, sans-serif; margin: 3em; } input { font: inherit; padding: .3em; }</style></head>
<body><h1>keycap admin</h1>
`)
	if problem != "" {
		p.f(`<p style="color:#b42318">%v</p>`, problem)
	}
	p.s(`
<form method="post" action="/admin/login">
<label>Admin token <input type="password" name="token" autocomplete="current-password" autofocus></label>
<button type="submit">Sign in</button>
</form></body></html>
`)
	return p.b.String()
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	if s.token() == "" {
		adminOff(w, true)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", pageCSP)
	_, _ = io.WriteString(w, loginPage(""))
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
		_, _ = io.WriteString(w, loginPage("That is not the admin token."))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: adminCookie, Value: cookieValue(want), Path: "/admin/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int((12 * time.Hour).Seconds())})
	http.Redirect(w, r, "/admin/", http.StatusSeeOther)
}
