package caddykeycap_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every Caddyfile and JSON block of docs/caddy.md is valid: caddy validate
// adapts it with Caddy's caddyfile adapter and provisions it, keycap's
// handlers included. A JSON block is a handler, put in a route of its own.
func TestDocsExamplesAreValid(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile("../docs/caddy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := fencedBlocks(string(md))
	dir := t.TempDir()
	n := 0
	for i, b := range blocks {
		var path string
		var args []string
		switch b.lang {
		case "caddyfile":
			path = filepath.Join(dir, "Caddyfile")
			args = []string{"--adapter", "caddyfile"}
		case "json":
			path = filepath.Join(dir, "caddy.json")
			b.text = `{"admin":{"disabled":true},"apps":{"http":{"servers":{"docs":{"listen":[":8080"],"routes":[{"handle":[` + b.text + `]}]}}}}}`
		default:
			continue
		}
		n++
		if err := os.WriteFile(path, []byte(b.text), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := caddyCmd(t, []string{"REDIS_ADDR=10.0.0.5:6379", "REDIS_PASSWORD=secret"},
			append([]string{"validate", "--config", path}, args...)...)
		if err != nil || !strings.Contains(out, "Valid configuration") {
			t.Errorf("docs/caddy.md, %s block %d (line %d): %v\n%s\n%s", b.lang, i, b.line, err, b.text, out)
		}
	}
	if n < 5 {
		t.Errorf("found %d Caddyfile and JSON blocks in docs/caddy.md, want at least 5", n)
	}
}

type fenced struct {
	lang, text string
	line       int
}

// fencedBlocks returns the fenced code blocks of a Markdown text.
func fencedBlocks(md string) []fenced {
	var out []fenced
	var cur *fenced
	var body []string
	for i, line := range strings.Split(md, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &fenced{lang: strings.TrimPrefix(line, "```"), line: i + 1}
			body = nil
		case cur != nil && line == "```":
			cur.text = strings.Join(body, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body = append(body, line)
		}
	}
	return out
}
