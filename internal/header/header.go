// Package header holds what keycap's header parsers share. Standard library
// only: the core packages use it.
package header

// SplitQuoted splits s at sep, except inside double-quoted strings (which may
// hold backslash escapes), as the list and parameter syntax of HTTP fields
// (RFC 9110 §5.6, RFC 7239, RFC 8941) requires.
func SplitQuoted(s string, sep byte) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}
