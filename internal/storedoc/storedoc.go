// Package storedoc checks that the doc comments of keycap's optional store
// interfaces say which of keycap's stores implement them: each interface's
// doc has a sentence "Implemented by a, b and c." and a store's tests call
// Check, which fails when the store implements an interface whose doc does
// not list it, or is listed by one it does not implement.
package storedoc

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/keycap/keycap"
)

// interfaces are the interfaces a store may implement, by name.
var interfaces = map[string]func(keycap.Store) bool{
	"Store":       func(keycap.Store) bool { return true },
	"NonBlocking": func(s keycap.Store) bool { _, ok := s.(keycap.NonBlocking); return ok },
	"Marker":      func(s keycap.Store) bool { _, ok := s.(keycap.Marker); return ok },
	"Pauser":      func(s keycap.Store) bool { _, ok := s.(keycap.Pauser); return ok },
	"Pacer":       func(s keycap.Store) bool { _, ok := s.(keycap.Pacer); return ok },
	"Syncer":      func(s keycap.Store) bool { _, ok := s.(keycap.Syncer); return ok },
	"Partitioner": func(s keycap.Store) bool { _, ok := s.(keycap.Partitioner); return ok },
	"Liner":       func(s keycap.Store) bool { _, ok := s.(keycap.Liner); return ok },
	"Notifier":    func(s keycap.Store) bool { _, ok := s.(keycap.Notifier); return ok },
	"Sharer":      func(s keycap.Store) bool { _, ok := s.(keycap.Sharer); return ok },
	"Inspector":   func(s keycap.Store) bool { _, ok := s.(keycap.Inspector); return ok },
	"Overrider":   func(s keycap.Store) bool { _, ok := s.(keycap.Overrider); return ok },
	"Pinner":      func(s keycap.Store) bool { _, ok := s.(keycap.Pinner); return ok },

	"AsyncReleaser": func(s keycap.Store) bool { _, ok := s.(keycap.AsyncReleaser); return ok },
}

var implementedBy = regexp.MustCompile(`Implemented by ([a-z, ]+?)(?:;|\.)`)

// Documented returns, for each of keycap's store interfaces, the stores its
// doc comment says implement it.
func Documented(t testing.TB) map[string][]string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no source location for storedoc")
	}
	root := filepath.Join(filepath.Dir(self), "..", "..") // the core module: package keycap
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(root, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var list []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name == "keycap" {
			list = append(list, f)
		}
	}
	if len(list) == 0 {
		t.Fatalf("no package keycap in %s", root)
	}
	p, err := doc.NewFromFiles(fset, list, "github.com/keycap/keycap")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, typ := range p.Types {
		if _, ok := interfaces[typ.Name]; !ok {
			continue
		}
		text := strings.Join(strings.Fields(typ.Doc), " ")
		m := implementedBy.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("the doc of keycap.%s does not say which stores implement it (\"Implemented by …\")", typ.Name)
			continue
		}
		out[typ.Name] = strings.FieldsFunc(strings.ReplaceAll(m[1], " and ", ","), func(r rune) bool { return r == ',' || r == ' ' })
	}
	for name := range interfaces {
		if _, ok := out[name]; !ok && !t.Failed() {
			t.Errorf("keycap.%s has no doc listing its stores", name)
		}
	}
	return out
}

// Check fails t if the doc of an interface that store (named name, as the
// docs spell it) implements does not list it, or lists it though it does not
// implement the interface.
func Check(t testing.TB, name string, store keycap.Store) {
	t.Helper()
	docs := Documented(t)
	for iface, implements := range interfaces {
		listed := false
		for _, n := range docs[iface] {
			listed = listed || n == name
		}
		switch got := implements(store); {
		case got && !listed:
			t.Errorf("%s implements keycap.%s, but its doc does not list %s (it lists %v)", name, iface, name, docs[iface])
		case !got && listed:
			t.Errorf("the doc of keycap.%s lists %s, which does not implement it", iface, name)
		}
	}
}
