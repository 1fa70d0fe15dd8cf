package gateway

import (
	"fmt"
	"html"
	"strings"
)

// The admin pages are written here with printf into escaped HTML rather
// than with html/template. text/template calls methods by name through
// reflect, and a binary that can do that keeps every exported method of
// every type it holds in an interface: the linker's dead-method
// elimination turns off, and 7.7 MB of the gateway's 23 MB (go-redis's
// hundreds of commands among them) were methods nothing calls.
//
// The pages put values in two places only: the text of an element and a
// double-quoted attribute's value, where escaping &, <, >, " and ' is all
// there is to do (html.EscapeString). No value goes into a script, a
// style, an unquoted attribute or a URL's scheme: the links are relative
// /admin/ paths whose queries url.Values encodes.

// markup is HTML written by this package (a chart, a fragment of a page):
// the page writer takes it as it is.
type markup string

// htmlPage builds a page.
type htmlPage struct{ b strings.Builder }

// f writes format, whose verbs are all %v, with args: a markup argument as
// it is, any other escaped (after fmt.Sprint for what is not a string).
func (p *htmlPage) f(format string, args ...any) {
	for i, a := range args {
		switch v := a.(type) {
		case markup:
			args[i] = string(v)
		case string:
			args[i] = html.EscapeString(v)
		default:
			args[i] = html.EscapeString(fmt.Sprint(v))
		}
	}
	fmt.Fprintf(&p.b, format, args...)
}

// s writes the page's own markup, a constant.
func (p *htmlPage) s(raw string) { p.b.WriteString(raw) }

// when returns raw if ok, else "": an attribute or fragment of the
// page's own that a condition turns on.
func when(ok bool, raw markup) markup {
	if ok {
		return raw
	}
	return ""
}
