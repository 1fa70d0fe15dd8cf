package caddykeycap_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/keycap/keycap/caddykeycap"
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

// docs/caddy.md names every field of the configuration, as JSON spells it
// (the Caddyfile's options are the same words): a field added to the
// module is documented, and among the blocks TestDocsExamplesAreValid
// checks, one sets a parent's adaptive total in each format.
func TestDocsNameEveryField(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/caddy.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	seen := map[reflect.Type]bool{}
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ.PkgPath() != reflect.TypeFor[caddykeycap.Handler]().PkgPath() || seen[typ] {
			return
		}
		seen[typ] = true
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			// `name`, `limits[]`, `parent <name> <max>`, `parent.adaptive`
			if !regexp.MustCompile("`" + regexp.QuoteMeta(name) + "[`\\[ .]").MatchString(md) {
				t.Errorf("docs/caddy.md does not name %s%s (`%s`)", path, name, name)
			}
			walk(path+name+".", f.Type)
		}
	}
	walk("", reflect.TypeFor[caddykeycap.Handler]())
	for _, typ := range []reflect.Type{reflect.TypeFor[caddykeycap.ParentConfig](), reflect.TypeFor[caddykeycap.AdaptiveConfig]()} {
		if !seen[typ] {
			t.Errorf("%v: not reached from the handler", typ)
		}
	}
	var caddyfile, json bool
	for _, b := range fencedBlocks(md) {
		caddyfile = caddyfile || b.lang == "caddyfile" && strings.Contains(b.text, "\t\t\t\tadaptive ")
		json = json || b.lang == "json" && strings.Contains(b.text, `"adaptive": {`)
	}
	if !caddyfile || !json {
		t.Errorf("an adaptive parent in a Caddyfile block: %v, in a JSON block: %v; want both", caddyfile, json)
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
