package gateway

import (
	"fmt"
	"html"
	"strings"
)

// The page's charts: inline SVG written here, about 60 lines, rather than a
// chart library. The page has no script (its Content-Security-Policy
// allows none), so a JavaScript library (Chart.js, uPlot) is out; the Go
// ones (go-echarts renders to JavaScript, gonum/plot to files through a
// font stack) would add megabytes to the binary for a few lines and bars.
// A chart is a series of HistoryStep points over HistoryWindow.

// chartSeries is one line (or, with bars, a bar per point) of a chart.
type chartSeries struct {
	name   string
	color  string
	bars   bool // bars on their own scale (counts per step), else a line on the chart's
	points []float64
}

const (
	chartW, chartH = 540.0, 84.0
	chartPad       = 14.0 // room for the axis' labels below
)

// chart draws series over the window: lines share one scale (its top
// labelled), bars have their own (their peak in the legend). title is its
// accessible name.
func chart(title string, series ...chartSeries) markup {
	var b strings.Builder
	top := 1.0
	for _, s := range series {
		if !s.bars {
			for _, v := range s.points {
				top = max(top, v)
			}
		}
	}
	plotH := chartH - chartPad
	fmt.Fprintf(&b, `<svg class="chart" role="img" viewBox="0 0 %g %g" width="%g" height="%g"><title>%s</title>`,
		chartW+40, chartH, chartW+40, chartH, html.EscapeString(title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%g" height="%g" fill="#f8f9fb"/>`, chartW, plotH)
	var legend []string
	for _, s := range series {
		n := len(s.points)
		if n == 0 {
			continue
		}
		dx := chartW / float64(n)
		if s.bars {
			peak := 0.0
			for _, v := range s.points {
				peak = max(peak, v)
			}
			for i, v := range s.points {
				if v > 0 {
					h := v / peak * (plotH - 2)
					fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity=".55"/>`,
						float64(i)*dx, plotH-h, max(dx-0.5, 0.5), h, s.color)
				}
			}
			legend = append(legend, fmt.Sprintf(`<tspan fill="%s">■ %s (peak %g)</tspan>`, s.color, html.EscapeString(s.name), peak))
			continue
		}
		b.WriteString(`<polyline fill="none" stroke-width="1.5" stroke="` + s.color + `" points="`)
		for i, v := range s.points {
			fmt.Fprintf(&b, "%.1f,%.1f ", (float64(i)+0.5)*dx, plotH-1-v/top*(plotH-2))
		}
		b.WriteString(`"/>`)
		legend = append(legend, fmt.Sprintf(`<tspan fill="%s">— %s</tspan>`, s.color, html.EscapeString(s.name)))
	}
	fmt.Fprintf(&b, `<text x="%g" y="10" font-size="10" fill="#667">%g</text>`, chartW+3, top)
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="10" fill="#667">0</text>`, chartW+3, plotH)
	fmt.Fprintf(&b, `<text x="0" y="%g" font-size="10" fill="#667">−15 min</text>`, chartH-2)
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="10" fill="#667" text-anchor="end">now</text>`, chartW, chartH-2)
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="10" text-anchor="middle">%s</text>`, chartW/2, chartH-2, strings.Join(legend, " "))
	b.WriteString(`</svg>`)
	return markup(b.String()) // every text in it escaped above; numbers and fixed colours otherwise
}

// floats converts counts to a chart's points.
func floats(xs []int) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}
