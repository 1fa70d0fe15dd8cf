package gateway

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/keycap/keycap"
)

// The configuration is decoded from yaml.v3's node tree by the decoder
// below, not by yaml.v3's own decoder: each value is decoded from its own
// node, so that every problem — a wrong type, an unknown field, a variable
// that is not set — is reported with the line, column and path of the value
// it concerns, and decoding goes on after it, so that a file's problems are
// all reported at once.

// problem is one thing wrong with a configuration, located in the file.
type problem struct {
	line, col int
	path      string
	msg       string
}

func (p problem) String() string {
	loc := fmt.Sprintf("line %d, column %d", p.line, p.col)
	if p.line == 0 {
		loc = "line 1, column 1"
	}
	if p.path == "" {
		return loc + ": " + p.msg
	}
	return loc + ": " + p.path + ": " + p.msg
}

// nodeDecoder is a type that decodes itself from a scalar node's text (after
// ${NAME} is expanded), returning a message for a value it does not accept.
type nodeDecoder interface {
	decodeText(s string) error
}

type decoder struct {
	problems []problem
	bad      map[string]bool // paths whose value could not be decoded
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func (d *decoder) add(n *yaml.Node, path []any, format string, args ...any) {
	p := problem{path: field(path...), msg: fmt.Sprintf(format, args...)}
	if n != nil {
		p.line, p.col = n.Line, n.Column
	}
	d.problems = append(d.problems, p)
	if d.bad == nil {
		d.bad = map[string]bool{}
	}
	d.bad[p.path] = true
}

// text returns a scalar's value with ${NAME} replaced by the environment
// variable NAME; a variable that is not set is a problem. Expanding after
// parsing means that a variable's value is always data: it can hold any
// character, and never adds structure to the file.
func (d *decoder) text(n *yaml.Node, path []any) (string, bool) {
	ok := true
	s := envRef.ReplaceAllStringFunc(n.Value, func(m string) string {
		name := m[2 : len(m)-1]
		v, set := os.LookupEnv(name)
		if !set {
			d.add(n, path, "environment variable %s is not set", name)
			ok = false
		}
		return v
	})
	return s, ok
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

var nodeDecoderType = reflect.TypeFor[nodeDecoder]()

// decode decodes n into v (addressable), reporting problems under path.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path []any) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if v.Kind() == reflect.Pointer {
		if isNull(n) {
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
		return
	}
	if v.Addr().Type().Implements(nodeDecoderType) {
		if v.Type() == reflect.TypeFor[Strings]() && n.Kind == yaml.SequenceNode {
			d.decodeList(n, v, path)
			return
		}
		if n.Kind != yaml.ScalarNode {
			d.add(n, path, "want a single value, not %s", kindName(n))
			return
		}
		s, ok := d.text(n, path)
		if !ok {
			return
		}
		if err := v.Addr().Interface().(nodeDecoder).decodeText(s); err != nil {
			d.add(n, path, "%v", err)
		}
		return
	}
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		// A type of keycap's (keycap.FailMode): its own words for a bad value.
		if n.Kind != yaml.ScalarNode {
			d.add(n, path, "want a single value, not %s", kindName(n))
			return
		}
		s, ok := d.text(n, path)
		if !ok {
			return
		}
		if err := u.UnmarshalText([]byte(s)); err != nil {
			var inv *keycap.InvalidLimitError
			if errors.As(err, &inv) {
				d.add(n, path, "invalid %s: %s", inv.Value, inv.Reason)
			} else {
				d.add(n, path, "%v", err)
			}
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		d.decodeList(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.String, reflect.Int, reflect.Bool, reflect.Float64:
		if n.Kind != yaml.ScalarNode {
			d.add(n, path, "want a single value, not %s", kindName(n))
			return
		}
		if isNull(n) {
			return // "field:" with nothing after it leaves the default
		}
		s, ok := d.text(n, path)
		if !ok {
			return
		}
		switch v.Kind() {
		case reflect.String:
			v.SetString(s)
		case reflect.Int:
			i, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				d.add(n, path, "want a whole number, not %q", s)
				return
			}
			v.SetInt(int64(i))
		case reflect.Float64:
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				d.add(n, path, "want a number, not %q", s)
				return
			}
			v.SetFloat(f)
		case reflect.Bool:
			switch strings.ToLower(strings.TrimSpace(s)) {
			case "true":
				v.SetBool(true)
			case "false":
				v.SetBool(false)
			default:
				d.add(n, path, "want true or false, not %q", s)
			}
		}
	default:
		panic("gateway: cannot decode configuration field of type " + v.Type().String())
	}
}

// removedFields says what became of the fields an earlier version took.
var removedFields = map[string]string{
	"show_keys": "removed: a signed-in admin sees keys in clear by default now; hash_keys: true shows hashes instead",
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path []any) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.add(n, path, "want a mapping of fields (name: value), not %s", kindName(n))
		return
	}
	t := v.Type()
	fields := map[string]int{}
	var names []string
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("yaml"); tag != "" && tag != "-" {
			fields[tag] = i
			names = append(names, tag)
		}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := append(path[:len(path):len(path)], k.Value)
		idx, ok := fields[k.Value]
		switch {
		case !ok && removedFields[k.Value] != "":
			d.add(k, p, "%s", removedFields[k.Value])
		case !ok:
			msg := "unknown field"
			if near := nearest(k.Value, names); near != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", near)
			} else {
				msg += " (docs/gateway.md lists them)"
			}
			d.add(k, p, "%s", msg)
		case seen[k.Value]:
			d.add(k, p, "given twice")
		default:
			seen[k.Value] = true
			d.decode(val, v.Field(idx), p)
		}
	}
}

func (d *decoder) decodeList(n *yaml.Node, v reflect.Value, path []any) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.add(n, path, "want a list ([a, b] or lines starting with -), not %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		d.decode(c, s.Index(i), append(path[:len(path):len(path)], i))
	}
	v.Set(s)
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path []any) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.add(n, path, "want a mapping (key: value), not %s", kindName(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := append(path[:len(path):len(path)], k.Value)
		key, ok := d.text(k, p)
		if !ok {
			continue
		}
		if m.MapIndex(reflect.ValueOf(key)).IsValid() {
			d.add(k, p, "given twice")
			continue
		}
		e := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, e, p)
		m.SetMapIndex(reflect.ValueOf(key), e)
	}
	v.Set(m)
}

// nearest returns the name among names closest to s, if it is close enough
// to be a typo (at most two edits), else "".
func nearest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// locate returns the node at path under root (map keys and list indexes), or
// the nearest ancestor that exists.
func locate(root *yaml.Node, path ...any) *yaml.Node {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, p := range path {
		for n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		switch p := p.(type) {
		case string:
			found := false
			for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == p {
					n, found = n.Content[i+1], true
					break
				}
			}
			if !found {
				return n
			}
		case int:
			if n.Kind != yaml.SequenceNode || p >= len(n.Content) {
				return n
			}
			n = n.Content[p]
		}
	}
	return n
}

// field renders a path: routes[0].limits[1].wait.
func field(path ...any) string {
	var b strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
		case int:
			b.WriteString("[" + strconv.Itoa(p) + "]")
		}
	}
	return b.String()
}

// sortProblems orders problems by their place in the file.
func sortProblems(ps []problem) {
	slices.SortStableFunc(ps, func(a, b problem) int {
		if a.line != b.line {
			return a.line - b.line
		}
		return a.col - b.col
	})
}
