package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/keycap/keycap/httplimit"
)

// keySource is where a limit reads its key: the client address ("ip"), a
// header, a cookie or a verified JWT claim.
type keySource struct {
	kind string // ip, header, cookie, claim
	name string // the header's (canonical), cookie's or claim's name
}

func parseKey(s string) (keySource, error) {
	if s == "" || s == "ip" {
		return keySource{kind: "ip"}, nil
	}
	kind, name, _ := strings.Cut(s, ":")
	switch kind {
	case "header":
		if name != "" {
			return keySource{kind, http.CanonicalHeaderKey(name)}, nil
		}
	case "cookie", "claim":
		if name != "" {
			return keySource{kind, name}, nil
		}
	}
	return keySource{}, fmt.Errorf("invalid key %q: ip, header:NAME, cookie:NAME or claim:NAME", s)
}

// String returns the source as a key's prefix: "ip", "header:X-User",
// "claim:sub".
func (k keySource) String() string {
	if k.kind == "ip" {
		return "ip"
	}
	return k.kind + ":" + k.name
}

// limitKey is how one limit of a route finds its key.
type limitKey struct {
	src       keySource
	onMissing string
}

// keyer finds the keys of a route's limits.
type keyer struct {
	limits []limitKey
	cip    httplimit.ClientIP
	verify *tokenVerifier
}

// keys returns the key of each limit for r. A key names its source, so that
// two limits never count in one pool: user 42's "claim:sub=42" is not tenant
// 42's "claim:tenant_id=42". A limit whose source is missing (no header, no
// cookie, no token that verifies) counts the client address in a pool of its
// own ("header:X-User absent, ip:203.0.113.7"), or, with on_missing: refuse,
// makes keys return that limit's source and false: the request is answered
// 401.
func (k *keyer) keys(r *http.Request) ([]string, *keySource, bool) {
	out := make([]string, len(k.limits))
	var claims map[string]string // the verified token's claims, read once
	claimsRead := false
	for i, l := range k.limits {
		var v string
		var ok bool
		switch l.src.kind {
		case "ip":
			out[i] = k.cip.Key(r)
			continue
		case "header":
			v = r.Header.Get(l.src.name)
			ok = v != ""
		case "cookie":
			if c, err := r.Cookie(l.src.name); err == nil && c.Value != "" {
				v, ok = c.Value, true
			}
		case "claim":
			if !claimsRead {
				claims, claimsRead = k.verify.claims(r), true
			}
			v, ok = claims[l.src.name]
		}
		switch {
		case ok:
			out[i] = l.src.String() + "=" + v
		case l.onMissing == MissingRefuse:
			return nil, &k.limits[i].src, false
		default:
			out[i] = l.src.String() + " absent, " + k.cip.Key(r)
		}
	}
	return out, nil, true
}

type keysCtxKey struct{}

// withKeys carries a request's keys from the route's handler to its
// limiter's LimitFunc.
func withKeys(ctx context.Context, keys []string) context.Context {
	return context.WithValue(ctx, keysCtxKey{}, keys)
}

func keysOf(r *http.Request) []string {
	k, _ := r.Context().Value(keysCtxKey{}).([]string)
	return k
}
