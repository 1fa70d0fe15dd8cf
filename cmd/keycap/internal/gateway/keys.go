package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
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

// limitKey is how one limit of a route finds its key, and its share.
type limitKey struct {
	src       keySource
	onMissing string
	share     *shareRule // nil: every key has the limit's share
}

// shareRule is how a limit finds each key's share of its parent: the
// value of by (the key's own value when by is nil) looked up in table, or,
// for a claim without a table, the claim as a number; def otherwise.
type shareRule struct {
	by    *keySource
	table map[string]int
	def   int
}

// of returns the share for the value v.
func (s *shareRule) of(v string, found bool) int {
	if !found {
		return s.def
	}
	if s.table != nil {
		if n, ok := s.table[v]; ok {
			return n
		}
		return s.def
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= MaxShare {
		return n
	}
	return s.def
}

// requestKeys are the keys of a request's limits, and each key's share
// (nil when no limit looks shares up).
type requestKeys struct {
	keys    []string
	shares  []int
	weights []int // nil: every limit's weight is 1
}

// keyer finds the keys of a route's limits.
type keyer struct {
	limits  []limitKey
	weights []int // the route's weight per limit, nil when all are 1
	cip     httplimit.ClientIP
	verify  *tokenVerifier
}

// keys returns the key of each limit for r. A key names its source, so that
// two limits never count in one pool: user 42's "claim:sub=42" is not tenant
// 42's "claim:tenant_id=42". A limit whose source is missing (no header, no
// cookie, no token that verifies) counts the client address in a pool of its
// own ("header:X-User absent, ip:203.0.113.7"), or, with on_missing: refuse,
// makes keys return that limit's source and false: the request is answered
// 401.
func (k *keyer) keys(r *http.Request) (requestKeys, *keySource, bool) {
	out := requestKeys{keys: make([]string, len(k.limits)), weights: k.weights}
	var claims map[string]string // the verified token's claims, read once
	claimsRead := false
	read := func(src keySource) (string, bool) {
		switch src.kind {
		case "header":
			v := r.Header.Get(src.name)
			return v, v != ""
		case "cookie":
			if c, err := r.Cookie(src.name); err == nil && c.Value != "" {
				return c.Value, true
			}
		case "claim":
			if !claimsRead {
				claims, claimsRead = k.verify.claims(r), true
			}
			v, ok := claims[src.name]
			return v, ok
		}
		return "", false
	}
	for i, l := range k.limits {
		var v string
		var ok bool
		if l.src.kind == "ip" {
			out.keys[i] = k.cip.Key(r)
		} else {
			v, ok = read(l.src)
			switch {
			case ok:
				out.keys[i] = l.src.String() + "=" + v
			case l.onMissing == MissingRefuse:
				return requestKeys{}, &k.limits[i].src, false
			default:
				out.keys[i] = l.src.String() + " absent, " + k.cip.Key(r)
			}
		}
		if l.share != nil {
			if out.shares == nil {
				out.shares = make([]int, len(k.limits))
			}
			if l.share.by != nil {
				v, ok = read(*l.share.by)
			}
			out.shares[i] = l.share.of(v, ok)
		}
	}
	return out, nil, true
}

type keysCtxKey struct{}

// withKeys carries a request's keys from the route's handler to its
// limiter's LimitFunc.
func withKeys(ctx context.Context, keys requestKeys) context.Context {
	return context.WithValue(ctx, keysCtxKey{}, keys)
}

func keysOf(r *http.Request) requestKeys {
	k, _ := r.Context().Value(keysCtxKey{}).(requestKeys)
	return k
}

// keySourceOf returns the source of a key the gateway built (keyer.keys):
// "header:X-User" of "header:X-User=alice", "ip" of an address,
// "header:X-User absent" of a request without the header, "" of any other
// string. It names a limit in metrics without its key's value.
func keySourceOf(key string) string {
	if strings.HasPrefix(key, "ip:") {
		return "ip"
	}
	// A source's name has neither "=" nor a space: what follows the first
	// of them is the client's (a value, an address), never a label.
	i := strings.IndexAny(key, "= ")
	switch {
	case i < 0:
		return "" // not a key the gateway builds: no source to name
	case key[i] == '=':
		return key[:i]
	case strings.HasPrefix(key[i:], " absent, "):
		return key[:i] + " absent"
	}
	return ""
}
