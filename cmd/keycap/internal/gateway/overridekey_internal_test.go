package gateway

import (
	"strings"
	"testing"

	"github.com/keycap/keycap/httplimit"
)

// TestOverrideKey: an override's key is checked against the route's limits
// and kept as the route's requests build it; one no request can ever build
// is refused with the forms it could take.
func TestOverrideKey(t *testing.T) {
	route := &RouteConfig{Name: "api", Limits: []LimitConfig{
		{Key: "header:x-user"}, {Key: "ip"}, {Key: "claim:sub"}, {Key: "cookie:session"},
	}}
	cip, err := httplimit.NewClientIP(httplimit.HeaderXForwardedFor, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, want string }{
		{"header:X-User=alice", "header:X-User=alice"},
		{"header:x-user=alice", "header:X-User=alice"},
		{"X-USER=alice", "header:X-User=alice"},
		{"  x-user=Alice ", "header:X-User=Alice"}, // values keep their case
		{"claim:sub=42", "claim:sub=42"},
		{"cookie:session=abc=def", "cookie:session=abc=def"},
		{"ip:203.0.113.7", "ip:203.0.113.7"},
		{"ip:::ffff:203.0.113.7", "ip:203.0.113.7"},
		{"ip:2001:db8:1:2:3:4:5:6", "ip:2001:db8:1:2::/64"},
		{"ip:2001:db8:1:2::/64", "ip:2001:db8:1:2::/64"},
		{"header:X-User absent, ip:203.0.113.7", "header:X-User absent, ip:203.0.113.7"},
		{"claim:sub absent, ip:2001:db8::9", "claim:sub absent, ip:2001:db8::/64"},
		{"header:X-User=a absent, b", "header:X-User=a absent, b"}, // a value, not the absent form
	} {
		got, err := overrideKey(route, cip, c.in)
		if err != nil || got != c.want {
			t.Errorf("overrideKey(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, why string }{
		{"", "empty"},
		{"alice", "no value"},
		{"header:X-Tenant=acme", "no limit of the route reads header:X-Tenant"},
		{"claim:tenant=acme", "no limit of the route reads claim:tenant"},
		{"ip:nowhere", `"nowhere" is not an IP address`},
		{"header:X-Tenant absent, ip:203.0.113.7", "no limit of the route reads header:X-Tenant"},
		{"header:X-User absent, 203.0.113.7", "the client's address"},
	} {
		_, err := overrideKey(route, cip, c.in)
		if err == nil || !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "header:X-User=alice") {
			t.Errorf("overrideKey(%q): %v, want an error saying %q and the forms a key takes", c.in, err, c.why)
		}
	}
	headerOnly := &RouteConfig{Name: "h", Limits: []LimitConfig{{Key: "header:X-User"}}}
	if _, err := overrideKey(headerOnly, cip, "ip:203.0.113.7"); err == nil || !strings.Contains(err.Error(), "client's address") {
		t.Errorf("an address on a route keyed by a header only: %v", err)
	}
}

// TestKeySourceOf: a key's source, for a label, never carries what the
// client sent — a value that looks like the on_missing form included.
func TestKeySourceOf(t *testing.T) {
	for key, want := range map[string]string{
		"header:X-User=alice":                  "header:X-User",
		"header:X-User=x absent, y":            "header:X-User",
		"claim:sub=a=b":                        "claim:sub",
		"ip:203.0.113.7":                       "ip",
		"ip:2001:db8::/64":                     "ip",
		"header:X-User absent, ip:203.0.113.7": "header:X-User absent",
		"header:X-User absent, ip:2001:db8::1": "header:X-User absent",
		"plain":                                "",
		"header:X-User something":              "",
	} {
		if got := keySourceOf(key); got != want {
			t.Errorf("keySourceOf(%q) = %q, want %q", key, got, want)
		}
	}
}
