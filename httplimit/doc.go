// Package httplimit caps the HTTP requests in flight per user, tenant or key:
// net/http middleware on keycap's leased slots.
//
// Register a named limiter, then put its middleware on routes:
//
//	limiters, _ := httplimit.New(limiter, httplimit.WithIdentify(currentUser))
//	limiters.For("exports", func(r *http.Request) httplimit.Rule {
//		return httplimit.Max(2) // per user, else per client IP
//	})
//	mux.Handle("POST /exports", limiters.Must("exports")(exportHandler))
//
// Each user now has at most 2 requests in flight on the routes that use
// "exports". The third gets 429 Too Many Requests with Retry-After: 1 at once,
// without reaching the handler. Middleware is a func(http.Handler)
// http.Handler, so it composes with net/http's ServeMux, chi (r.With), echo
// (echo.WrapMiddleware) and gin (see examples/frameworks/gin).
//
// A limiter's function returns one limit (a Slots), several (All: each must
// grant), or nil for no limit on that request. It runs on every request, so a
// limit can depend on the user's plan, the tenant, the route.
//
// # Keys
//
// A Slots without By counts against the default key: the authenticated caller
// as "kind:id" (WithIdentify), else "ip:" and the client's address. The client
// address honours trusted proxies (WithClientIP); untrusted proxy headers are
// ignored. A pool belongs to its limiter: key "user:1" in "exports" and in
// "reports" are two pools.
//
// # Responses
//
// A refused request gets 429 Too Many Requests with Retry-After (the refusing
// limit's, default 1 s; 0 sends none), as JSON ({"message":"Too Many
// Concurrent Requests"}) for clients that accept JSON and as plain text
// otherwise. No X-RateLimit-* headers are sent: they describe a rate window
// and would be wrong here. Slots.Respond replaces the response.
//
// When the store fails, a limit that fails open runs the handler, and one that
// fails closed answers 503 Service Unavailable with the largest Retry-After
// among the request's limits. A store failure never becomes a 500; it is
// reported to the keycap Limiter's observer once per outage.
//
// An invalid limit returned by a limiter's function (a negative max, two
// limits on one key) is the application's bug: the request gets a 500 and the
// problem is logged with the limiter's name.
//
// # When a slot is released
//
// When the handler returns: after a normal response, after a streamed one
// (flushed bodies, server-sent events: the stream is the work), after a panic
// (the slot is released and the panic goes on, http.ErrAbortHandler included),
// and after the client disconnects (the request's context ends; the slot is
// released when the handler returns). While the handler runs, the lease is
// renewed, so a stream longer than the slot's TTL keeps its slot, and a
// crashed process frees it within one TTL.
//
// The middleware does not wrap the ResponseWriter: http.Flusher,
// http.Hijacker and http.ResponseController work as without it.
package httplimit
