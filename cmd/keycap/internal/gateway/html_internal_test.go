package gateway

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// hostile is a key (or any name a page shows) written to break out of the
// text or the attribute it lands in.
const hostile = `x"'><img src=x onerror=alert(1)><script>alert(2)</script>&amp;+`

// TestPagesEscapeEveryValue: with a hostile string in every field the
// pages show, an HTML parser finds only the pages' own elements, and the
// string comes back whole in text and attribute values.
func TestPagesEscapeEveryValue(t *testing.T) {
	two, ts := 2, time.Now().Add(-time.Minute)
	d := pageData{Q: HistoryQuery{Route: hostile, Search: hostile, Sort: "key", N: 7}, Routes: []string{hostile}, Sorts: Sorts,
		CSRF: hostile, Refresh: 5, Done: hostile, Window: "15 minutes", PoolRoute: map[string]string{hostile: hostile}}
	d.S.Node, d.S.At, d.S.Problems = hostile, time.Now(), []string{hostile}
	d.Limits = []pageLimit{{LimitSummary: LimitSummary{Pool: hostile, Source: hostile, Routes: []string{hostile}, Max: hostile,
		Busiest: []KeyUsage{{Key: hostile, Held: 1, Max: 1, Waiting: 1}}}, Route: hostile,
		Chart:   chart(hostile, chartSeries{name: hostile, color: "#123", points: []float64{1}}),
		KeyRows: []pageKey{{KeyHistory: KeyHistory{Key: hostile, LastRefused: &ts}, Link: keyLink(hostile, hostile)}}}}
	d.Traffic = []pageRoute{{RouteHistory: RouteHistory{Route: hostile}}}
	d.S.Apps = []AppSummary{{App: hostile, Busiest: []KeyUsage{{Key: hostile}}}}
	d.S.Totals = []TotalSummary{{Parent: hostile, Reason: hostile}}
	d.S.Pauses = []PauseSummary{{ID: hostile}}
	d.S.Overrides = []OverrideView{{Family: "conn", Name: hostile, Key: hostile, Max: &two}, {Family: "app", Name: hostile, Key: hostile}}
	k := keyPageData{CSRF: hostile, Back: hostile, Done: hostile, Err: hostile, Raw: hostile,
		R: KeyReport{Route: hostile, Key: hostile, Pools: []KeyPool{{Pool: hostile, Holders: []HolderView{{Owner: hostile, Node: hostile, Label: hostile}}}},
			History: []KeyHistory{{Limit: hostile}}}}
	for name, page := range map[string]string{"incident": incidentPage(d), "key": keyPageHTML(k), "login": loginPage(hostile)} {
		whole, z := 0, html.NewTokenizer(strings.NewReader(page))
		for tt := z.Next(); tt != html.ErrorToken; tt = z.Next() {
			tok := z.Token()
			switch tok.Type {
			case html.StartTagToken, html.SelfClosingTagToken:
				if tok.Data == "img" || tok.Data == "script" {
					t.Fatalf("%s page: a <%s> element from a value", name, tok.Data)
				}
				for _, a := range tok.Attr {
					if a.Key == "onerror" {
						t.Fatalf("%s page: an attribute from a value: %v", name, tok)
					}
					whole += strings.Count(a.Val, hostile)
				}
			case html.TextToken:
				whole += strings.Count(tok.Data, hostile)
			}
		}
		if whole == 0 {
			t.Errorf("%s page: the value came back whole %d times", name, whole)
		}
	}
}
