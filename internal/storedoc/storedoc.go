// Package storedoc checks that the doc comment of each store feature says
// which of keycap's stores declare it: each constant of store.Features has a
// sentence "Implemented by a, b and c." and a store's tests call Check,
// which fails when the store declares a feature whose doc does not list it,
// or is listed by one it does not declare.
package storedoc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/keycap/keycap/store"
)

var implementedBy = regexp.MustCompile(`Implemented by ([a-z, ]+?)(?:;|\.)`)

// Documented returns, for each feature of package store, the stores its doc
// comment says implement it.
func Documented(t testing.TB) map[store.Features][]string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no source location for storedoc")
	}
	path := filepath.Join(filepath.Dir(self), "..", "..", "store", "store.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[store.Features][]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		bit := -1
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if len(vs.Names) != 1 || vs.Names[0].Name == "AllFeatures" {
				continue
			}
			if vs.Values != nil {
				if len(vs.Values) != 1 || !strings.Contains(types(vs.Values[0]), "iota") {
					continue // another const block
				}
				bit = 0
			} else if bit < 0 {
				continue
			} else {
				bit++
			}
			name := vs.Names[0].Name
			if name == "lastFeature" {
				break
			}
			text := strings.Join(strings.Fields(vs.Doc.Text()), " ")
			m := implementedBy.FindStringSubmatch(text)
			if m == nil {
				t.Errorf("the doc of store.%s does not say which stores implement it (\"Implemented by …\")", name)
				continue
			}
			out[store.Features(1)<<bit] = strings.FieldsFunc(strings.ReplaceAll(m[1], " and ", ","), func(r rune) bool { return r == ',' || r == ' ' })
		}
	}
	for f := store.Features(1); f < store.AllFeatures; f <<= 1 {
		if _, ok := out[f]; !ok && !t.Failed() {
			t.Errorf("store feature %s has no doc listing its stores", f)
		}
	}
	return out
}

// types renders an expression's identifiers, enough to spot iota.
func types(e ast.Expr) string {
	var b strings.Builder
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			b.WriteString(id.Name + " ")
		}
		return true
	})
	return b.String()
}

// Check fails t if the doc of a feature that s (named name, as the docs
// spell it) declares does not list it, or lists it though s does not
// declare it.
func Check(t testing.TB, name string, s store.Store) {
	t.Helper()
	docs := Documented(t)
	has := s.Features()
	for f, stores := range docs {
		listed := false
		for _, n := range stores {
			listed = listed || n == name
		}
		switch got := has.Has(f); {
		case got && !listed:
			t.Errorf("%s declares %s, but its doc does not list %s (it lists %v)", name, f, name, stores)
		case !got && listed:
			t.Errorf("the doc of %s lists %s, which does not declare it", f, name)
		}
	}
}
