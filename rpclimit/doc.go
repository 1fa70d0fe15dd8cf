// Package rpclimit decides the limits of RPCs: which calls are capped, per
// which key, and what a refused caller is told. It is the rule shared by
// keycap's RPC front doors, grpclimit (grpc-go interceptors) and
// connectlimit (Connect interceptors), which turn a call into a Call and a
// Refusal into their protocol's status; an application builds its limits
// here and hands them to one of those.
//
//	limits, _ := rpclimit.New(limiter)
//	limits.Set("/export.v1.ExportService/*", rpclimit.Max(2).ByMetadata("x-tenant"))
//	limits.Set("*", rpclimit.Max(50)) // per caller, on every other procedure
//
// # Patterns
//
// A pattern names one procedure ("/pkg.Service/Method"), every procedure
// of a service ("/pkg.Service/*"), or every procedure ("*"). A call takes
// the function of its most specific pattern; the pattern names the limits
// (and so their pools) unless their spec names them.
//
// # Keys
//
// A Slots counts against the default key unless it says otherwise: the
// authenticated caller as "kind:id" (WithIdentify), else "ip:" and the
// peer's address, through trusted proxies only (WithClientIP, the rule of
// httplimit.ClientIP). By sets a key; ByMetadata reads it from the call's
// metadata, as "md:name:value", bounded by MaxKeyBytes. A call that lacks
// that metadata is refused with InvalidArgument, or counted by the default
// key, or let through, as IfMissing says: never an internal error.
//
// # Refusals
//
// Over a limit, a call is refused with ResourceExhausted and a retry delay
// (Slots.RetryAfter, default 1 s), which the doors send as gRPC's RetryInfo
// detail and the grpc-retry-pushback-ms trailer that grpc-go's retry policy
// obeys. When the store fails, a limit that fails open lets the call run and
// one that fails closed refuses it with Unavailable and the largest delay of
// the call's limits. Several limits are all-or-nothing (All). Waits, weights,
// parents, shadows and overrides are the keycap.Spec's and the Limiter's, as
// for every front door.
//
// # When a slot is released
//
// When the handler returns — a unary call's handler has its response, a
// stream's has sent its last message — or, for a call cancelled, past its
// deadline or whose connection ended, once the handler sees its context end
// and returns. While
// the handler runs the lease is renewed, so a stream longer than the TTL
// keeps its slot, and a crashed server's slots come back within one TTL.
package rpclimit
