package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/keycap/keycap/internal/header"
)

// Proxy headers that ClientIP can read.
const (
	HeaderXForwardedFor = "X-Forwarded-For"
	HeaderForwarded     = "Forwarded" // RFC 7239
)

// ClientIP finds the address of the client behind a request.
//
// Without trusted proxies it is the connection's remote address, and proxy
// headers are ignored: anyone can send them. With trusted proxies, and a
// request that arrives from one, the proxy header is walked from the right
// (the hop nearest to this server) past every trusted address; the first
// address that is not trusted is the client. If every address is trusted, the
// leftmost one is. Only the one header the proxies write is read: a proxy that
// appends to X-Forwarded-For passes a client's own Forwarded header through
// untouched, so reading both would let clients choose their address.
//
// The zero ClientIP trusts no proxy.
type ClientIP struct {
	trusted []netip.Prefix
	header  string
	v6bits  int // IPv6 addresses are grouped by this prefix length; 0: no grouping
}

// NewClientIP returns a ClientIP that trusts the proxies in cidrs (addresses
// or prefixes, such as "10.0.0.0/8" or "::1") and reads header, which must be
// HeaderXForwardedFor or HeaderForwarded. ipv6Prefix groups IPv6 clients by
// that many leading bits (64 counts a /64 as one client); 0 turns grouping off.
func NewClientIP(header string, ipv6Prefix int, cidrs ...string) (ClientIP, error) {
	c := ClientIP{v6bits: ipv6Prefix}
	switch http.CanonicalHeaderKey(header) {
	case HeaderXForwardedFor, HeaderForwarded:
		c.header = http.CanonicalHeaderKey(header)
	default:
		return ClientIP{}, fmt.Errorf("httplimit: invalid proxy header %q: must be %q or %q", header, HeaderXForwardedFor, HeaderForwarded)
	}
	if ipv6Prefix < 0 || ipv6Prefix > 128 {
		return ClientIP{}, fmt.Errorf("httplimit: invalid IPv6 prefix length %d: must be between 0 and 128", ipv6Prefix)
	}
	for _, s := range cidrs {
		p, err := parsePrefix(s)
		if err != nil {
			return ClientIP{}, fmt.Errorf("httplimit: invalid trusted proxy %q: %v", s, err)
		}
		c.trusted = append(c.trusted, p)
	}
	return c, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Trusted reports whether a is the address of a trusted proxy.
func (c ClientIP) Trusted(a netip.Addr) bool { return c.isTrusted(a.Unmap()) }

func (c ClientIP) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Addr returns the client's address, unmapped from IPv4-in-IPv6. It returns
// false when the remote address cannot be parsed (a unix socket, say).
func (c ClientIP) Addr(r *http.Request) (netip.Addr, bool) {
	chain, ok := c.chain(r)
	if !ok {
		return netip.Addr{}, false
	}
	return chain[0], true
}

// ForwardedFor returns the X-Forwarded-For that a proxy in front of another
// server should send on: the client's address (Addr), then the trusted hops
// between it and this server, the connection's peer last. What the client
// wrote to the left of its own address is dropped, so the next server can
// trust the header as this one does. It returns "" when the remote address
// cannot be parsed.
func (c ClientIP) ForwardedFor(r *http.Request) string {
	chain, ok := c.chain(r)
	if !ok {
		return ""
	}
	var b strings.Builder
	for i, a := range chain {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.String())
	}
	return b.String()
}

// chain returns the client's address followed by the trusted hops up to this
// server, the connection's peer last: the path the request took, as far as
// it can be trusted.
func (c ClientIP) chain(r *http.Request) ([]netip.Addr, bool) {
	return c.chainOf(r.RemoteAddr, r.Header.Values)
}

// chainOf is chain for a peer at remoteAddr whose proxy headers values
// returns (by canonical name): the same rule for any protocol's requests.
func (c ClientIP) chainOf(remoteAddr string, values func(name string) []string) ([]netip.Addr, bool) {
	remote, ok := parseNode(remoteAddr)
	if !ok {
		return nil, false
	}
	if len(c.trusted) == 0 || !c.isTrusted(remote) {
		return []netip.Addr{remote}, true
	}
	hdr := values(c.header)
	if len(hdr) == 0 {
		return []netip.Addr{remote}, true
	}
	var hops []string
	if c.header == HeaderForwarded {
		hops = forwardedFor(hdr)
	} else {
		for _, v := range hdr {
			hops = append(hops, strings.Split(v, ",")...)
		}
	}
	// Walk from the right; stop at the first untrusted hop. A hop that cannot
	// be parsed was not written by a trusted proxy (they write their peer's
	// address): the nearest address known is the client then.
	rev := []netip.Addr{remote}
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseNode(strings.TrimSpace(hops[i]))
		if !ok {
			break
		}
		rev = append(rev, a)
		if !c.isTrusted(a) {
			break
		}
	}
	slices.Reverse(rev)
	return rev, true
}

// Key returns the client's address as a pool key: "ip:203.0.113.7", or with
// IPv6 grouping "ip:2001:db8:1:2::/64". Requests whose address cannot be
// parsed share the key "ip:unknown".
func (c ClientIP) Key(r *http.Request) string {
	a, ok := c.Addr(r)
	if !ok {
		return "ip:unknown"
	}
	return c.KeyOf(a)
}

// KeyFrom is Key for a request of another protocol (a gRPC call): from
// the peer's address, remoteAddr ("host:port" or an address alone), and its
// proxy headers, which values returns by canonical name ("X-Forwarded-For",
// "Forwarded"); values is called only when remoteAddr is a trusted proxy.
func (c ClientIP) KeyFrom(remoteAddr string, values func(name string) []string) string {
	chain, ok := c.chainOf(remoteAddr, values)
	if !ok {
		return "ip:unknown"
	}
	return c.KeyOf(chain[0])
}

// KeyOf returns the pool key of the client address a, as Key does for a
// request from a: to name a client's key (an override, a look-up) as its
// requests build it.
func (c ClientIP) KeyOf(a netip.Addr) string {
	if a.Is6() && c.v6bits > 0 && c.v6bits < 128 {
		p, _ := a.Prefix(c.v6bits)
		return "ip:" + p.String()
	}
	return "ip:" + a.String()
}

// parseNode parses an address as proxies and servers write it: "1.2.3.4",
// "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:80", and in
// Forwarded headers the same quoted.
func parseNode(s string) (netip.Addr, bool) {
	s = strings.Trim(s, `"`)
	if s == "" {
		return netip.Addr{}, false
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// forwardedFor returns the for= value of each element of Forwarded headers
// (RFC 7239), in order. An element without for= gives an empty hop, which
// stops the walk.
func forwardedFor(values []string) []string {
	var hops []string
	for _, v := range values {
		for _, elem := range header.SplitQuoted(v, ',') {
			hop := ""
			for _, pair := range header.SplitQuoted(elem, ';') {
				name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
					hop = strings.TrimSpace(value)
				}
			}
			hops = append(hops, hop)
		}
	}
	return hops
}
