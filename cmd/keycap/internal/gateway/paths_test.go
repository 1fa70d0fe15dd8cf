package gateway

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

func TestCanonicalPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/":                  "/",
		"/report":            "/report",
		"/report/":           "/report/",
		"/%72eport":          "/report",
		"//report":           "/report",
		"/a//b///c":          "/a/b/c",
		"/a/./b":             "/a/b",
		"/a/b/..":            "/a/",
		"/a/b/../":           "/a/",
		"/a/.":               "/a/",
		"/..":                "/",
		"/../../a":           "/a",
		"/%2e%2e/a":          "/a",
		"/a/%2E/b":           "/a/b",
		"/app/app-key/x/..":  "/app/app-key/",
		"/app/./app-key":     "/app/app-key",
		"/a%20b":             "/a b",
		"/caf%C3%A9":         "/café",
		"/a%25b":             "/a%b",
		"/a;b=c":             "/a;b=c",
		"/app/x/../app-key":  "/app/app-key",
		"/users/42/export/.": "/users/42/export/",
	} {
		got, err := canonicalPath(in)
		if err != nil || got != want {
			t.Errorf("canonicalPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "report", "/a%2Fb", "/a%2fb", "/a%5Cb", "/a\\b", "/a%00", "/a\x00", "/a%0a", "/a%zz", "/a%4", "/a%", "/a\x7f"} {
		if got, err := canonicalPath(bad); err == nil {
			t.Errorf("canonicalPath(%q) = %q, want it refused", bad, got)
		}
	}
}

func TestPathVariants(t *testing.T) {
	t.Parallel()
	got := strings.Join(pathVariants("/Report"), " ")
	if got != "/report /Report/ /report/" {
		t.Fatalf("variants of /Report: %q", got)
	}
	if v := pathVariants("/"); len(v) != 0 {
		t.Fatalf("variants of /: %q", v)
	}
}

// FuzzCanonicalPath: whatever a client sends, the canonical path is clean
// (what path.Clean gives, its trailing slash aside), holds no byte an
// upstream could read as a separator or a terminator, and is stable: the
// canonical form of its escaped form is itself.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/app/app-key%2F", "/a/./b/../c", "//x", "/%2e%2e/", "/a%25", "/caf%C3%A9/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, escaped string) {
		p, err := canonicalPath(escaped)
		if err != nil {
			return
		}
		if strings.ContainsAny(p, "\\\x00") || strings.Contains(p, "//") {
			t.Fatalf("canonicalPath(%q) = %q: holds a separator or a NUL", escaped, p)
		}
		trimmed := strings.TrimSuffix(p, "/")
		if trimmed == "" {
			trimmed = "/"
		}
		if c := path.Clean(p); c != trimmed {
			t.Fatalf("canonicalPath(%q) = %q, not clean (%q)", escaped, p, c)
		}
		again, err := canonicalPath(escapePath(p))
		if err != nil || again != p {
			t.Fatalf("canonicalPath(%q) = %q, but its escaped form %q gives %q, %v", escaped, p, escapePath(p), again, err)
		}
		if u, err := url.Parse(escapePath(p)); err != nil || u.Path != p {
			t.Fatalf("escaped %q does not parse back: %v %v", escapePath(p), u, err)
		}
	})
}
