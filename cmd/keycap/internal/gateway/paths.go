package gateway

import (
	"errors"
	"net/url"
	"strings"
)

// The gateway decides on a request by its path and forwards that same path
// upstream, so that what it capped is what the upstream serves. Before
// routing, every path is put in one canonical form:
//
//   - percent-encoded bytes are decoded, and re-encoded only where a path
//     needs it (so /%72eport is /report);
//   - "." and ".." segments are resolved, never above the root (so
//     /app/key/x/.. is /app/key);
//   - runs of slashes become one (so //report is /report);
//   - a trailing slash is kept: /api/ and /api are different paths.
//
// Paths that the gateway and an upstream could read differently are refused
// with 400: an encoded slash or backslash (%2F, %5C), a raw backslash, a
// control character or NUL, an invalid escape, a path that does not start
// with a slash.
//
// Routes then match the canonical path; when only the catch-all would match
// it, the path with its case folded and its trailing slash toggled is tried
// too, so that /Report/ is capped like /report on upstreams that ignore case
// or trailing slashes. (The upstream still receives the canonical path as the
// client wrote it: matching a variant over-caps at worst, never under-caps.)

// errBadPath is the reason canonicalPath refuses a path.
var errBadPath = errors.New("path the gateway will not forward")

// canonicalPath returns the canonical, unescaped form of an escaped request
// path, or errBadPath.
func canonicalPath(escaped string) (string, error) {
	if escaped == "" || escaped[0] != '/' {
		return "", errBadPath
	}
	var segs []string
	var b strings.Builder
	flush := func() {
		switch s := b.String(); s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
		b.Reset()
	}
	trailing := false
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c == '%' {
			if i+2 >= len(escaped) || !isHex(escaped[i+1]) || !isHex(escaped[i+2]) {
				return "", errBadPath
			}
			c = unhex(escaped[i+1])<<4 | unhex(escaped[i+2])
			i += 2
			if c == '/' || c == '\\' {
				return "", errBadPath
			}
		} else if c == '/' {
			flush()
			trailing = true
			continue
		}
		if c < 0x20 || c == 0x7f || c == '\\' {
			return "", errBadPath
		}
		b.WriteByte(c)
		trailing = false
	}
	last := b.String()
	flush()
	if last == "." || last == ".." {
		trailing = true // /a/. and /a/b/.. name a directory
	}
	out := "/" + strings.Join(segs, "/")
	if trailing && len(segs) > 0 {
		out += "/"
	}
	return out, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// escapePath returns the escaped form of a canonical path, as forwarded.
func escapePath(p string) string { return (&url.URL{Path: p}).EscapedPath() }

// pathVariants returns the other spellings of a canonical path that an
// upstream may treat as the same: folded to lower case, and with its
// trailing slash toggled. The path itself is not among them.
func pathVariants(p string) []string {
	var out []string
	add := func(v string) {
		if v != p && v != "" {
			for _, o := range out {
				if o == v {
					return
				}
			}
			out = append(out, v)
		}
	}
	toggle := func(s string) string {
		if s == "/" {
			return s
		}
		if strings.HasSuffix(s, "/") {
			return strings.TrimSuffix(s, "/")
		}
		return s + "/"
	}
	lower := strings.ToLower(p)
	add(lower)
	add(toggle(p))
	add(toggle(lower))
	return out
}
