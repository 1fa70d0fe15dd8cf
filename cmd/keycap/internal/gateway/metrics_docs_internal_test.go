package gateway

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDocumentedMetricsExist: docs/gateway.md names exactly the keycap_
// metric families the gateway exports (a name ending in * stands for the
// families it begins), no more, no fewer.
func TestDocumentedMetricsExist(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics()
	m.refusedConns("test", &limitListener{})
	ch := make(chan *prometheus.Desc, 1000)
	m.reg.Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var exported []string
	for d := range ch {
		if name := fq.FindStringSubmatch(d.String()); name != nil && strings.HasPrefix(name[1], "keycap_") {
			exported = append(exported, name[1])
		}
	}
	if len(exported) < 5 {
		t.Fatalf("the gateway describes %d keycap_ families: %v", len(exported), exported)
	}
	named := regexp.MustCompile(`keycap_[a-z_]+\*?`).FindAllString(string(doc), -1)
	covered := func(family string) bool {
		for _, n := range named {
			if p, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(family, p) || n == family {
				return true
			}
		}
		return false
	}
	for _, n := range named {
		p, wild := strings.CutSuffix(n, "*")
		if !slices.ContainsFunc(exported, func(e string) bool { return e == n || wild && strings.HasPrefix(e, p) }) {
			t.Errorf("docs/gateway.md names %s, which the gateway does not export (it does: %v)", n, exported)
		}
	}
	for _, e := range exported {
		if !covered(e) {
			t.Errorf("the gateway exports %s, which docs/gateway.md does not name", e)
		}
	}
}
