package header

import (
	"slices"
	"testing"
)

func TestSplitQuoted(t *testing.T) {
	for _, c := range []struct {
		in   string
		sep  byte
		want []string
	}{
		{"", ',', []string{""}},
		{"a,b", ',', []string{"a", "b"}},
		{`for="[::1]:80";proto=http, for=x`, ',', []string{`for="[::1]:80";proto=http`, ` for=x`}},
		{`a="x,y";b=1`, ';', []string{`a="x,y"`, "b=1"}},
		{`a="x\",y",b`, ',', []string{`a="x\",y"`, "b"}},
		{`a="unterminated,b`, ',', []string{`a="unterminated,b`}},
	} {
		if got := SplitQuoted(c.in, c.sep); !slices.Equal(got, c.want) {
			t.Errorf("SplitQuoted(%q, %q) = %q, want %q", c.in, c.sep, got, c.want)
		}
	}
}
