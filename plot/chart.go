package plot

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Axis is what a chart's x axis counts.
type Axis int

const (
	// Steps: optimizer steps (the row's step).
	Steps Axis = iota
	// Epochs: epochs completed (the row's 0-based epoch plus one), for
	// metrics logged once per epoch.
	Epochs
)

func (a Axis) String() string {
	if a == Epochs {
		return "epoch"
	}
	return "step"
}

// Chart is one picture: some metrics of some runs against one axis.
type Chart struct {
	// Name is the file name without extension ("loss", "loss_epoch", ...).
	Name   string
	Title  string
	X      Axis
	YLabel string
	// XLabel names the x axis where the step numbers stand for another
	// count (ranks, batch size); empty: the axis's own name.
	XLabel string
	Keys   []string
	// LegendBottom puts the legend at the bottom right, out of the way of
	// curves that rise (accuracy); the default is the top right.
	LegendBottom bool
}

// group is a family of metrics drawn on one chart.
type group struct {
	name, title, ylabel string
	bottom              bool
	match               func(key string) bool
}

var (
	lrKey  = regexp.MustCompile(`(^|[_/.\-])(lr|learning_rate)($|[_/.\-])`)
	memKey = regexp.MustCompile(`(_mb|_bytes|_mib|_gib|mem)$`)
	cpuKey = regexp.MustCompile(`(^|[_/.\-])cpu`)
)

// groups are tried in order; the first match takes the key.
var groups = []group{
	{name: "loss", title: "Loss", ylabel: "loss", match: func(k string) bool { return GoalOf(k) == Minimize }},
	{name: "accuracy", title: "Accuracy", ylabel: "score", bottom: true, match: func(k string) bool { return GoalOf(k) == Maximize }},
	{name: "lr", title: "Learning rate", ylabel: "learning rate", match: func(k string) bool { return lrKey.MatchString(strings.ToLower(k)) }},
	{name: "cpu", title: "CPU utilisation", ylabel: "% of one core", match: func(k string) bool { return cpuKey.MatchString(strings.ToLower(k)) }},
	{name: "memory", title: "Memory", ylabel: "MB", match: func(k string) bool { return memKey.MatchString(strings.ToLower(k)) }},
}

// Layout returns the charts for runs: each group of metrics against step,
// and against epoch for its metrics logged once per epoch in every run that
// has them; then one chart per remaining metric. A nil History has no
// metrics: it adds no chart (WriteCharts and Render refuse it).
func Layout(runs ...*History) []Chart {
	keys := unionKeys(runs)
	byGroup := make([][]string, len(groups))
	var rest []string
	for _, k := range keys {
		placed := false
		for i, g := range groups {
			if g.match(k) {
				byGroup[i] = append(byGroup[i], k)
				placed = true
				break
			}
		}
		if !placed {
			rest = append(rest, k)
		}
	}
	var out []Chart
	// Names are file names: two metrics that fileSafe maps alike
	// ("grad/norm" and "grad_norm") get "_2", "_3", ... rather than one
	// chart overwriting the other's files.
	used := map[string]bool{}
	unique := func(name string) string {
		n := name
		for i := 2; used[n]; i++ {
			n = fmt.Sprintf("%s_%d", name, i)
		}
		used[n] = true
		return n
	}
	add := func(name, title, ylabel string, bottom bool, ks []string) {
		if len(ks) == 0 {
			return
		}
		name = unique(name)
		out = append(out, Chart{Name: name, Title: title + " by step", X: Steps, YLabel: ylabel, Keys: ks, LegendBottom: bottom})
		var ep []string
		for _, k := range ks {
			if epochLevel(runs, k) {
				ep = append(ep, k)
			}
		}
		if len(ep) > 0 {
			out = append(out, Chart{Name: unique(name + "_epoch"), Title: title + " by epoch", X: Epochs, YLabel: ylabel, Keys: ep, LegendBottom: bottom})
		}
	}
	for i, g := range groups {
		add(g.name, g.title, g.ylabel, g.bottom, byGroup[i])
	}
	for _, k := range rest {
		add("metric_"+fileSafe(k), k, k, false, []string{k})
	}
	return out
}

func unionKeys(runs []*History) []string {
	seen := map[string]bool{}
	var keys []string
	for _, h := range runs {
		if h == nil {
			continue
		}
		for _, k := range h.Keys() {
			if !seen[k] && len(h.Series(k)) > 0 {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

func epochLevel(runs []*History, k string) bool {
	any := false
	for _, h := range runs {
		if h == nil || len(h.Series(k)) == 0 {
			continue
		}
		if !h.EpochLevel(k) {
			return false
		}
		any = true
	}
	return any
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.\-]+`)

func fileSafe(s string) string {
	s = unsafeChars.ReplaceAllString(s, "_")
	if s == "" || s == "." || s == ".." {
		return "_"
	}
	return s
}

// Options tune the pictures. The zero value is ready to use.
type Options struct {
	// Width and Height of each chart. 0: 8 x 5 inches (768 x 480 pixels
	// in PNG, which is drawn at 96 dots per inch).
	Width, Height vg.Length
	// Formats are the file formats written by WriteCharts. nil: png, svg.
	Formats []string
	// Smoothing is the weight of the exponential moving average drawn over
	// step series of more than SmoothAbove points, as TensorBoard's slider
	// (the raw values stay visible, faint). 0: 0.6; negative: no smoothing.
	Smoothing float64
	// SmoothAbove is the number of points from which a series is smoothed.
	// 0: 20.
	SmoothAbove int
	// Prefix is put before every file name WriteCharts writes (for
	// example "rank_" for per-rank figures beside the run's charts).
	Prefix string
}

func (o Options) withDefaults() Options {
	if o.Width == 0 {
		o.Width = 8 * vg.Inch
	}
	if o.Height == 0 {
		o.Height = 5 * vg.Inch
	}
	if o.Formats == nil {
		o.Formats = []string{"png", "svg"}
	}
	if o.Smoothing == 0 {
		o.Smoothing = 0.6
	}
	if o.SmoothAbove == 0 {
		o.SmoothAbove = 20
	}
	return o
}

// Validate reports every bad option at once.
func (o Options) Validate() error {
	var errs []string
	if o.Width < 0 || o.Height < 0 {
		errs = append(errs, fmt.Sprintf("Width x Height is %v x %v: use positive sizes, or 0 for 8 x 5 inches", o.Width, o.Height))
	}
	if o.Smoothing >= 1 {
		errs = append(errs, fmt.Sprintf("Smoothing is %g: use a weight below 1 (0 for 0.6, negative for none)", o.Smoothing))
	}
	if o.SmoothAbove < 0 {
		errs = append(errs, fmt.Sprintf("SmoothAbove is %d: use 0 (20) or a positive number of points", o.SmoothAbove))
	}
	for _, f := range o.Formats {
		if err := checkFormat(f); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("plot options: %s", strings.Join(errs, "; "))
	}
	return nil
}

func checkFormat(f string) error {
	switch f {
	case "png", "svg", "pdf", "eps", "jpg", "jpeg", "tif", "tiff":
		return nil
	}
	return fmt.Errorf("format %q is not known: use png, svg, pdf, eps, jpg or tif", f)
}

// checkRuns finds a nil History: ReadRun's or ReadCSV's on an error,
// passed on unchecked.
func checkRuns(runs []*History) error {
	for i, h := range runs {
		if h == nil {
			return fmt.Errorf("runs[%d] is nil: pass the History that ReadRun or ReadCSV returned (check its error first), or leave that run out", i)
		}
	}
	return nil
}

// Smooth returns the exponential moving average of v with weight w,
// debiased as TensorBoard does so the first values are not pulled to 0.
// The weight lies in [0, 1), as TensorBoard's: 0 leaves v as it is, and the
// closer to 1 the smoother. Outside that range it is clamped (Smooth has no
// error to return): below 0, or NaN, to 0; 1 or more, where the average
// would be 0/0, to 0.999.
func Smooth(v []float64, w float64) []float64 {
	switch {
	case !(w >= 0): // NaN too
		w = 0
	case w >= 1:
		w = 0.999
	}
	out := make([]float64, len(v))
	last := 0.0
	for i, x := range v {
		last = last*w + (1-w)*x
		out[i] = last / (1 - math.Pow(w, float64(i+1)))
	}
	return out
}

// Render draws chart c of runs in format ("png", "svg", ...) to w.
func Render(w io.Writer, c Chart, runs []*History, format string, opt Options) error {
	// Every problem of the call at once, before the data is looked at.
	if err := errors.Join(checkFormat(format), checkRuns(runs), opt.Validate()); err != nil {
		return fmt.Errorf("plot.Render: %w", err)
	}
	opt = opt.withDefaults()
	p, err := newPlot(c, runs, opt)
	if err != nil {
		return err
	}
	b, err := encode(p, opt, format)
	if err != nil {
		return fmt.Errorf("chart %s: %w", c.Name, err)
	}
	_, err = w.Write(b)
	return err
}

// encode renders p in format. gonum/plot's EPS begins "%%!PS-Adobe", which
// PostScript readers (Ghostscript, epstopdf, file(1)) do not take for
// PostScript: the first line is fixed to "%!PS-Adobe".
func encode(p *gplot.Plot, opt Options, format string) ([]byte, error) {
	wt, err := p.WriterTo(opt.Width, opt.Height, format)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("%s: %w", format, err)
	}
	b := buf.Bytes()
	if format == "eps" && bytes.HasPrefix(b, []byte("%%!PS-Adobe")) {
		b = b[1:]
	}
	return b, nil
}

func newPlot(c Chart, runs []*History, opt Options) (*gplot.Plot, error) {
	p := gplot.New()
	for _, st := range []*text.Style{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle,
		&p.X.Tick.Label, &p.Y.Tick.Label, &p.Legend.TextStyle} {
		st.Font.Variant = "Sans"
	}
	p.Title.Text = c.Title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.X.Label.Text = c.X.String()
	if c.X == Epochs {
		p.X.Label.Text = "epochs completed"
	}
	if c.XLabel != "" {
		p.X.Label.Text = c.XLabel
	}
	p.Y.Label.Text = c.YLabel
	p.Title.Padding = vg.Points(8)
	p.Legend.Top = !c.LegendBottom
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(8), -vg.Points(6)
	if c.LegendBottom {
		p.Legend.YOffs = vg.Points(6)
	}
	p.Legend.TextStyle.Font.Size = vg.Points(11)
	p.Legend.ThumbnailWidth = vg.Points(24)
	p.Add(plotter.NewGrid())
	multi := len(runs) > 1
	drawn := 0
	for ri, h := range runs {
		for ki, k := range c.Keys {
			pts := h.Series(k)
			if c.X == Epochs {
				pts = epochPoints(pts)
			}
			if len(pts) == 0 {
				continue
			}
			xy := make(plotter.XYs, len(pts))
			vals := make([]float64, len(pts))
			for i, pt := range pts {
				xy[i].X = float64(pt.Step)
				if c.X == Epochs {
					xy[i].X = pt.Epoch + 1
				}
				xy[i].Y = pt.Value
				vals[i] = pt.Value
			}
			col, dash := plotutil.Color(ki), plotutil.Dashes(0)
			if multi {
				col, dash = plotutil.Color(ri), plotutil.Dashes(ki)
			}
			name := k
			if multi {
				name = h.Label + "  " + k
			}
			smooth := c.X == Steps && opt.Smoothing > 0 && len(pts) > opt.SmoothAbove
			if smooth {
				raw, err := plotter.NewLine(xy)
				if err != nil {
					return nil, fmt.Errorf("chart %s, %s: %w", c.Name, k, err)
				}
				raw.Color = faint(col)
				raw.Width = vg.Points(1)
				raw.Dashes = dash
				p.Add(raw)
				sm := Smooth(vals, opt.Smoothing)
				sxy := make(plotter.XYs, len(xy))
				for i := range xy {
					sxy[i] = plotter.XY{X: xy[i].X, Y: sm[i]}
				}
				xy = sxy
			}
			line, points, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, fmt.Errorf("chart %s, %s: %w", c.Name, k, err)
			}
			line.Color, line.Width, line.Dashes = col, vg.Points(2), dash
			if len(xy) <= 30 {
				points.Shape = draw.CircleGlyph{}
				points.Color = col
				points.Radius = vg.Points(2.5)
				p.Add(line, points)
				p.Legend.Add(name, line, points)
			} else {
				p.Add(line)
				p.Legend.Add(name, line)
			}
			drawn++
		}
	}
	if drawn == 0 {
		return nil, fmt.Errorf("chart %s: no finite value of %v in the runs given", c.Name, c.Keys)
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = plainTicks{}, plainTicks{}
	if c.X == Epochs {
		p.X.Tick.Marker = integerTicks{}
	}
	// Keep points off the frame and make room for the legend above (or
	// below) the curves, so it never hides data.
	xr, yr := p.X.Max-p.X.Min, p.Y.Max-p.Y.Min
	if xr == 0 {
		xr = math.Max(math.Abs(p.X.Max), 1)
	}
	if yr == 0 {
		yr = math.Max(math.Abs(p.Y.Max), 1e-3)
	}
	p.X.Min, p.X.Max = p.X.Min-0.02*xr, p.X.Max+0.02*xr
	room := 0.06 + 0.055*float64(drawn)
	if c.LegendBottom {
		p.Y.Min, p.Y.Max = p.Y.Min-room*yr, p.Y.Max+0.04*yr
	} else {
		p.Y.Min, p.Y.Max = p.Y.Min-0.04*yr, p.Y.Max+room*yr
	}
	return p, nil
}

// epochPoints keeps the points logged with an epoch.
func epochPoints(pts []Point) []Point {
	out := pts[:0:0]
	for _, p := range pts {
		if !math.IsNaN(p.Epoch) {
			out = append(out, p)
		}
	}
	return out
}

func faint(c color.Color) color.Color {
	// The colours of plotutil are opaque, so RGBA is not premultiplied.
	r, g, b, _ := c.RGBA()
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 96}
}

// plainTicks are gonum's default ticks labelled without padding zeros
// ("250", not "250.00").
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []gplot.Tick {
	ts := gplot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ts {
		if t.Label == "" {
			continue
		}
		ts[i].Label = strconv.FormatFloat(t.Value, 'g', 6, 64)
	}
	return ts
}

// integerTicks labels whole epochs only.
type integerTicks struct{}

func (integerTicks) Ticks(min, max float64) []gplot.Tick {
	var out []gplot.Tick
	lo, hi := math.Ceil(min), math.Floor(max)
	step := math.Max(1, math.Ceil((hi-lo)/10))
	for v := lo; v <= hi; v += step {
		out = append(out, gplot.Tick{Value: v, Label: fmt.Sprintf("%.0f", v)})
	}
	return out
}

// WriteCharts renders every chart of Layout(runs) into dir in each of
// opt.Formats and returns the files written, relative to dir, in layout
// order (for each chart, one file per format). Each file is written to a
// temporary name and renamed, so a reader never sees half a picture.
func WriteCharts(dir string, runs []*History, opt Options) ([]string, error) {
	if len(runs) == 0 {
		return nil, fmt.Errorf("no runs to plot: pass at least one history")
	}
	if err := checkRuns(runs); err != nil {
		return nil, fmt.Errorf("plot.WriteCharts: %w", err)
	}
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	opt = opt.withDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plots directory: %w", err)
	}
	charts := Layout(runs...)
	if len(charts) == 0 {
		return nil, fmt.Errorf("no metric has a finite value: nothing to plot")
	}
	var files []string
	for _, c := range charts {
		p, err := newPlot(c, runs, opt)
		if err != nil {
			return files, err
		}
		for _, f := range opt.Formats {
			b, err := encode(p, opt, f)
			if err != nil {
				return files, fmt.Errorf("chart %s: %w", c.Name, err)
			}
			name := fileSafe(opt.Prefix+c.Name) + "." + f
			if err := writeAtomic(filepath.Join(dir, name), b); err != nil {
				return files, err
			}
			files = append(files, name)
		}
	}
	return files, nil
}

// writeAtomic writes b to a temporary file beside path and renames it.
func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}
