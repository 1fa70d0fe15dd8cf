package gateway_test

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
)

// TestDocumentedConfigFields: every field a table of docs/gateway.md names
// exists in the configuration, and every field of the configuration is in
// the table of its section.
func TestDocumentedConfigFields(t *testing.T) {
	raw, err := os.ReadFile("../../../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	// The section a table documents, by the heading or line before it.
	sections := map[string]reflect.Type{
		"":          reflect.TypeFor[gateway.Config](),
		"server":    reflect.TypeFor[gateway.ServerConfig](),
		"timeouts":  reflect.TypeFor[gateway.TimeoutsConfig](),
		"store":     reflect.TypeFor[gateway.StoreConfig](),
		"client_ip": reflect.TypeFor[gateway.ClientIPConfig](),
		"jwt":       reflect.TypeFor[gateway.JWTConfig](),
		"routes":    reflect.TypeFor[gateway.RouteConfig](),
		"A limit:":  reflect.TypeFor[gateway.LimitConfig](),
		"pusher":    reflect.TypeFor[gateway.PusherConfig](),
		"An app:":   reflect.TypeFor[gateway.PusherAppConfig](),
	}
	heading := regexp.MustCompile("^### `([a-z_]+)`")
	name := regexp.MustCompile("`([a-z0-9_.]+)`")
	documented := map[string][]string{}
	section, inTable := "", false
	for _, line := range strings.Split(string(raw), "\n") {
		switch m := heading.FindStringSubmatch(line); {
		case m != nil:
			section = m[1]
		case line == "A limit:" || line == "An app:":
			section = line
		case strings.HasPrefix(line, "## ") && section != "":
			section = "none"
		}
		if strings.HasPrefix(line, "| Field") {
			inTable = true
			continue
		}
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		if !inTable || strings.HasPrefix(line, "|---") {
			continue
		}
		typ, ok := sections[section]
		if !ok {
			t.Fatalf("docs/gateway.md: a table of fields in section %q, which the test does not know", section)
		}
		cell := strings.SplitN(line, "|", 3)[1]
		for _, m := range name.FindAllStringSubmatch(cell, -1) {
			documented[section] = append(documented[section], m[1])
			if !hasField(typ, strings.Split(m[1], ".")) {
				t.Errorf("docs/gateway.md, section %q, names the field %s: the configuration has none", section, m[1])
			}
		}
	}
	for section, typ := range sections {
		for _, f := range yamlFields(typ) {
			if !slices.Contains(documented[section], f) && !slices.ContainsFunc(documented[section], func(d string) bool {
				return strings.HasPrefix(d, f+".") // a section documented by its dotted fields
			}) && !(section == "" && sections[f] != nil) {
				t.Errorf("docs/gateway.md, section %q: no row for the field %s", section, f)
			}
		}
	}
}

// yamlFields lists a struct's fields by their YAML names.
func yamlFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("yaml"); tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	return out
}

// hasField reports whether path (YAML names) leads to a field of t.
func hasField(t reflect.Type, path []string) bool {
	for len(path) > 0 {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return false
		}
		i := slices.IndexFunc(reflect.VisibleFields(t), func(f reflect.StructField) bool { return f.Tag.Get("yaml") == path[0] })
		if i < 0 {
			return false
		}
		t, path = reflect.VisibleFields(t)[i].Type, path[1:]
	}
	return true
}
