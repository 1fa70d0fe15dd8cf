// Package caddykeycap is a Caddy v2 module that caps the requests in flight
// per key: at most N at once per user, tenant, API key or client address,
// on one Caddy or, through Redis, Redis Sentinel or Redis Cluster, on every
// Caddy that shares the store.
//
// The handler, http.handlers.keycap (Caddyfile directive keycap), takes a
// slot of each of its limits before it calls the next handler and gives
// them back when that handler returns: a reverse_proxy's response, streams
// included, is served while the slots are held. A request over a limit gets
// 429 with Retry-After; a store failure, 503 for a limit that fails closed,
// the next handler for one that fails open.
//
//	example.com {
//		keycap {
//			limit api {
//				key {http.request.header.X-User}
//				max 2
//			}
//		}
//		reverse_proxy 127.0.0.1:3000
//	}
//
// Build Caddy with it by
//
//	xcaddy build --with github.com/keycap/keycap/caddykeycap
//
// or with a main package like cmd/caddy's. docs/caddy.md describes every
// option.
package caddykeycap
