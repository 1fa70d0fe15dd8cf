package gateway

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/keycap/keycap/httplimit"
)

// MaxOverride bounds the max an override may set: a key's max beyond it is
// surely a typo (no route holds a million requests of one key at once).
const MaxOverride = 1_000_000

// overrideKey checks an override's key against the limits of route and
// returns it as the gateway builds it for a request (keyer.keys): the
// source's name in its canonical form (a header's case), an address in its
// canonical form, "NAME=value" read as the header NAME when a limit of the
// route reads that header. A key that no limit of the route can ever build
// is refused, with the forms it could take: an override on it would be set
// and never apply.
func overrideKey(route *RouteConfig, cip httplimit.ClientIP, key string) (string, error) {
	sources := make([]keySource, 0, len(route.Limits))
	seen := make(map[string]bool)
	for _, l := range route.Limits {
		src, err := parseKey(l.Key)
		if err == nil && !seen[src.String()] {
			seen[src.String()] = true
			sources = append(sources, src)
		}
	}
	forms := make([]string, len(sources))
	for i, src := range sources {
		forms[i] = src.example()
	}
	refuse := func(why string) (string, error) {
		return "", fmt.Errorf("key %q: %s; route %q's limits are keyed by %s, so its keys look like %s",
			key, why, route.Name, strings.Join(names(sources), ", "), strings.Join(forms, " or "))
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return refuse("empty")
	}
	// A request without a limit's header, cookie or claim counts by its
	// address under a key of its own (on_missing: ip). A source's name has
	// no "=" nor space, so a value that holds " absent, " is a value.
	if name, ip, ok := strings.Cut(key, " absent, "); ok && !strings.ContainsAny(name, "= ") {
		src, err := parseKey(name)
		if err != nil || !seen[src.String()] || src.kind == "ip" {
			return refuse("no limit of the route reads " + name)
		}
		k, err := overrideKey(&RouteConfig{Name: route.Name, Limits: []LimitConfig{{Key: "ip"}}}, cip, ip)
		if err != nil {
			return refuse("after \"absent, \" comes the client's address, such as ip:203.0.113.7")
		}
		return src.String() + " absent, " + k, nil
	}
	if addr, ok := strings.CutPrefix(key, "ip:"); ok {
		if !seen["ip"] {
			return refuse("no limit of the route is keyed by the client's address")
		}
		a, err := netip.ParseAddr(addr)
		if err != nil {
			p, perr := netip.ParsePrefix(addr)
			if perr != nil {
				return refuse(fmt.Sprintf("%q is not an IP address", addr))
			}
			a = p.Addr()
		}
		return cip.KeyOf(a.Unmap()), nil
	}
	name, value, ok := strings.Cut(key, "=")
	if !ok || value == "" {
		return refuse("no value: a key is a source and a value, NAME=value")
	}
	src, err := parseKey(name)
	if err != nil || src.kind == "ip" {
		// A bare name: the header of that name, if a limit reads it.
		src = keySource{"header", http.CanonicalHeaderKey(name)}
	}
	if !seen[src.String()] {
		return refuse("no limit of the route reads " + src.String())
	}
	return src.String() + "=" + value, nil
}

// names returns the sources' names.
func names(sources []keySource) []string {
	out := make([]string, len(sources))
	for i, s := range sources {
		out[i] = s.String()
	}
	return out
}

// example returns a key of the source, as an override names it.
func (k keySource) example() string {
	switch k.kind {
	case "ip":
		return "ip:203.0.113.7"
	case "claim":
		return k.String() + "=42"
	}
	return k.String() + "=alice"
}
