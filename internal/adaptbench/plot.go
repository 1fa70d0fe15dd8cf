package adaptbench

import (
	"fmt"
	"image/color"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePNG draws the report to a PNG at path: above, each strategy's total
// limit over time beside the backend's capacity C(t) (clipped at 4×C0);
// below, each strategy's rolling goodput ÷ C/S.
func (r *Report) WritePNG(path string) error {
	c := r.Config
	top := plot.New()
	top.Title.Text = fmt.Sprintf("Total limit across %d processes (slots; clipped at 4×C0)", c.Processes)
	top.Y.Label.Text = "slots"
	top.Legend.Top = true
	ceiling := float64(4 * c.Capacity)
	top.Y.Min, top.Y.Max = 0, ceiling*1.4 // room for the legend

	bottom := plot.New()
	bottom.Title.Text = "Goodput ÷ C/S (rolling 250 ms)"
	bottom.X.Label.Text = "seconds"
	bottom.Y.Min = 0

	capLine, err := plotter.NewLine(capacitySteps(c.Phases))
	if err != nil {
		return err
	}
	capLine.Color = color.Black
	capLine.Width = vg.Points(2.5)
	capLine.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	top.Add(capLine)
	top.Legend.Add("C(t)", capLine)

	for i, res := range r.Results {
		col := plotutil.Color(i)
		if res.Limit != nil {
			pts := make(plotter.XYs, len(res.Limit))
			for j, p := range res.Limit {
				pts[j] = plotter.XY{X: p.T, Y: min(p.V, ceiling)}
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.StepStyle = plotter.PostStep
			l.Color, l.Width = col, vg.Points(1.5)
			top.Add(l)
			top.Legend.Add(res.Strategy, l)
		}
		if len(res.Good) > 0 {
			pts := make(plotter.XYs, len(res.Good))
			for j, p := range res.Good {
				pts[j] = plotter.XY{X: p.T, Y: p.V}
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color, l.Width = col, vg.Points(1)
			bottom.Add(l)
			bottom.Legend.Add(res.Strategy, l)
		}
	}
	bottom.Legend.Top = true
	peak := 1.0
	for _, res := range r.Results {
		for _, p := range res.Good {
			peak = max(peak, p.V)
		}
	}
	bottom.Y.Max = peak * 1.5 // room for the legend
	end := Total(c.Phases).Seconds()
	top.X.Min, top.X.Max = 0, end
	bottom.X.Min, bottom.X.Max = 0, end
	top.Add(plotter.NewGrid())
	bottom.Add(plotter.NewGrid())

	const w, h = 10 * vg.Inch, 8 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6),
		PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(12)}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// capacitySteps is C(t) as a step line.
func capacitySteps(phases []Phase) plotter.XYs {
	var pts plotter.XYs
	var t time.Duration
	for _, p := range phases {
		pts = append(pts, plotter.XY{X: t.Seconds(), Y: float64(p.Capacity)})
		t += p.Duration
		pts = append(pts, plotter.XY{X: t.Seconds(), Y: float64(p.Capacity)})
	}
	return pts
}
