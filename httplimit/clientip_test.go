package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/keycap/keycap/httplimit"
)

func mustClientIP(t testing.TB, header string, v6 int, cidrs ...string) httplimit.ClientIP {
	t.Helper()
	c, err := httplimit.NewClientIP(header, v6, cidrs...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientIP(t *testing.T) {
	t.Parallel()
	xff := mustClientIP(t, httplimit.HeaderXForwardedFor, 0, "10.0.0.0/8", "::1")
	fwd := mustClientIP(t, httplimit.HeaderForwarded, 0, "10.0.0.0/8")
	grouped := mustClientIP(t, httplimit.HeaderXForwardedFor, 64, "10.0.0.0/8")
	cases := []struct {
		name   string
		c      httplimit.ClientIP
		remote string
		header []string
		want   string
	}{
		{"no proxy trusted: headers ignored", httplimit.ClientIP{}, "203.0.113.7:5000", []string{"X-Forwarded-For", "1.1.1.1"}, "ip:203.0.113.7"},
		{"untrusted remote: headers ignored", xff, "203.0.113.7:5000", []string{"X-Forwarded-For", "1.1.1.1"}, "ip:203.0.113.7"},
		{"trusted remote, no header", xff, "10.0.0.2:5000", nil, "ip:10.0.0.2"},
		{"one proxy", xff, "10.0.0.2:5000", []string{"X-Forwarded-For", "198.51.100.9"}, "ip:198.51.100.9"},
		{"spoofed left part is skipped", xff, "10.0.0.2:5000", []string{"X-Forwarded-For", "6.6.6.6, 198.51.100.9"}, "ip:198.51.100.9"},
		{"two trusted proxies", xff, "10.0.0.2:5000", []string{"X-Forwarded-For", "198.51.100.9, 10.1.1.1"}, "ip:198.51.100.9"},
		{"several header lines", xff, "10.0.0.2:5000", []string{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "198.51.100.9, 10.1.1.1"}, "ip:198.51.100.9"},
		{"all trusted: leftmost", xff, "10.0.0.2:5000", []string{"X-Forwarded-For", "10.9.9.9, 10.1.1.1"}, "ip:10.9.9.9"},
		{"garbage stops the walk", xff, "10.0.0.2:5000", []string{"X-Forwarded-For", "198.51.100.9, garbage, 10.1.1.1"}, "ip:10.1.1.1"},
		{"port in header", xff, "10.0.0.2:5000", []string{"X-Forwarded-For", "198.51.100.9:4711"}, "ip:198.51.100.9"},
		{"IPv6 loopback proxy", xff, "[::1]:5000", []string{"X-Forwarded-For", "2001:db8::7"}, "ip:2001:db8::7"},
		{"IPv4-mapped remote", xff, "[::ffff:10.0.0.2]:5000", []string{"X-Forwarded-For", "198.51.100.9"}, "ip:198.51.100.9"},
		{"Forwarded not read when X-Forwarded-For is configured", xff, "10.0.0.2:5000", []string{"Forwarded", "for=6.6.6.6"}, "ip:10.0.0.2"},
		{"X-Forwarded-For not read when Forwarded is configured", fwd, "10.0.0.2:5000", []string{"X-Forwarded-For", "6.6.6.6"}, "ip:10.0.0.2"},
		{"Forwarded", fwd, "10.0.0.2:5000", []string{"Forwarded", "for=198.51.100.9;proto=https;by=10.0.0.2"}, "ip:198.51.100.9"},
		{"Forwarded quoted IPv6 with port", fwd, "10.0.0.2:5000", []string{"Forwarded", `for="[2001:db8:cafe::17]:4711"`}, "ip:2001:db8:cafe::17"},
		{"Forwarded several elements", fwd, "10.0.0.2:5000", []string{"Forwarded", "for=6.6.6.6, for=198.51.100.9;proto=http, for=10.3.3.3"}, "ip:198.51.100.9"},
		{"Forwarded case and spaces", fwd, "10.0.0.2:5000", []string{"Forwarded", "For = 198.51.100.9 ; Proto=http"}, "ip:198.51.100.9"},
		{"Forwarded comma inside quotes", fwd, "10.0.0.2:5000", []string{"Forwarded", `for=198.51.100.9;x="a,b"`}, "ip:198.51.100.9"},
		{"Forwarded unknown stops the walk", fwd, "10.0.0.2:5000", []string{"Forwarded", "for=6.6.6.6, for=unknown"}, "ip:10.0.0.2"},
		{"Forwarded obfuscated stops the walk", fwd, "10.0.0.2:5000", []string{"Forwarded", "for=_hidden"}, "ip:10.0.0.2"},
		{"IPv6 grouped by /64", grouped, "[2001:db8:1:2:3:4:5:6]:1", nil, "ip:2001:db8:1:2::/64"},
		{"IPv4 not grouped", grouped, "203.0.113.7:1", nil, "ip:203.0.113.7"},
		{"unparseable remote", xff, "@unix", nil, "ip:unknown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			for i := 0; i+1 < len(tc.header); i += 2 {
				r.Header.Add(tc.header[i], tc.header[i+1])
			}
			if got := tc.c.Key(r); got != tc.want {
				t.Fatalf("Key = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewClientIPRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header string
		v6     int
		cidrs  []string
		field  string
	}{
		{"X-Real-IP", 0, nil, "proxy header"},
		{httplimit.HeaderForwarded, 129, nil, "IPv6 prefix"},
		{httplimit.HeaderForwarded, -1, nil, "IPv6 prefix"},
		{httplimit.HeaderForwarded, 0, []string{"10.0.0.0/33"}, "trusted proxy"},
		{httplimit.HeaderForwarded, 0, []string{"localhost"}, "trusted proxy"},
	} {
		_, err := httplimit.NewClientIP(tc.header, tc.v6, tc.cidrs...)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("NewClientIP(%q, %d, %v) = %v, want an error naming %q", tc.header, tc.v6, tc.cidrs, err, tc.field)
		}
	}
	// Lower-case header names are fine.
	if _, err := httplimit.NewClientIP("x-forwarded-for", 0); err != nil {
		t.Error(err)
	}
}

// FuzzClientIP feeds arbitrary proxy headers: never a panic, and the address
// found is the remote address or one written in the header.
func FuzzClientIP(f *testing.F) {
	for _, s := range []string{
		"198.51.100.9", "6.6.6.6, 198.51.100.9", `for="[2001:db8::1]:80";proto=http`, "for=unknown",
		`for="\"`, ",,,", "[::1", "for=", "\x00", `for="a\`, "1.2.3.4%eth0",
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	cx := mustClientIP(f, httplimit.HeaderXForwardedFor, 64, "10.0.0.0/8")
	cf := mustClientIP(f, httplimit.HeaderForwarded, 64, "10.0.0.0/8")
	f.Fuzz(func(t *testing.T, header string, forwarded bool) {
		c, name := cx, "X-Forwarded-For"
		if forwarded {
			c, name = cf, "Forwarded"
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.2:5000"
		r.Header.Set(name, header)
		a, ok := c.Addr(r)
		if !ok {
			t.Fatal("no address for a parseable remote")
		}
		if a != netip.MustParseAddr("10.0.0.2") && !appearsIn(header, a) {
			t.Fatalf("address %s is neither the remote address nor written in %q", a, header)
		}
		_ = c.Key(r)
	})
}

// appearsIn reports whether some substring of s parses as a (alone or with a
// port).
func appearsIn(s string, a netip.Addr) bool {
	for i := range len(s) {
		for j := i + 1; j <= len(s) && j-i <= 64; j++ {
			if b, err := netip.ParseAddr(s[i:j]); err == nil && b.Unmap() == a {
				return true
			}
			if ap, err := netip.ParseAddrPort(s[i:j]); err == nil && ap.Addr().Unmap() == a {
				return true
			}
		}
	}
	return false
}

// TestForwardedFor: the header a proxy sends on follows the same trusted-proxy
// rule as the client's address: the client, then the trusted hops, the peer
// last; whatever an untrusted client wrote is dropped.
func TestForwardedFor(t *testing.T) {
	t.Parallel()
	xff := mustClientIP(t, httplimit.HeaderXForwardedFor, 0, "10.0.0.0/8")
	cases := []struct {
		name   string
		c      httplimit.ClientIP
		remote string
		header string
		want   string
	}{
		{"no proxy trusted", httplimit.ClientIP{}, "203.0.113.7:5000", "6.6.6.6", "203.0.113.7"},
		{"untrusted peer's header is replaced", xff, "127.0.0.1:5000", "6.6.6.6", "127.0.0.1"},
		{"trusted peer, no header", xff, "10.0.0.2:5000", "", "10.0.0.2"},
		{"trusted peer", xff, "10.0.0.2:5000", "198.51.100.9", "198.51.100.9, 10.0.0.2"},
		{"spoofed left part dropped", xff, "10.0.0.2:5000", "6.6.6.6, 198.51.100.9, 10.1.1.1", "198.51.100.9, 10.1.1.1, 10.0.0.2"},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		if tc.header != "" {
			r.Header.Set("X-Forwarded-For", tc.header)
		}
		if got := tc.c.ForwardedFor(r); got != tc.want {
			t.Errorf("%s: ForwardedFor = %q, want %q", tc.name, got, tc.want)
		}
	}
}
