package trainer

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/fulgur-ml/fulgur/module"
)

// progress shows training progress on rank 0: a one-line bar redrawn in
// place on a terminal, periodic log lines otherwise.
type progress struct {
	cfg     *Config
	on      bool
	rank0   bool
	tty     bool
	w       io.Writer
	epoch   int
	epochs  int
	total   int
	start   time.Time
	last    time.Time
	samples int
	lossEMA float64
	nLoss   int
	bar     []string
}

func newProgress(cfg *Config, rank0 bool) (*progress, error) {
	p := &progress{cfg: cfg, on: rank0 && cfg.progressBar(), rank0: rank0, w: cfg.Out}
	for _, cb := range cfg.Callbacks {
		if d, ok := cb.(ProgressDisplay); ok {
			yes, err := ability("callbacks/"+cb.Name(), "DisplaysProgress", d.DisplaysProgress)
			if err != nil {
				return nil, err
			}
			if yes {
				p.on = false // a progress callback replaces the built-in display
			}
		}
	}
	if f, ok := cfg.Out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
	}
	return p, nil
}

func (p *progress) startEpoch(epoch, epochs, total int) {
	if p == nil || !p.on {
		return
	}
	p.epoch, p.epochs, p.total = epoch, epochs, total
	p.start = p.cfg.Now()
	p.last = p.start
	p.samples, p.nLoss = 0, 0
}

func (p *progress) batch(done int, loss float64, rows int, metrics map[string]float64, step []module.Metric) {
	if p == nil || !p.on {
		return
	}
	p.samples += rows
	if p.nLoss == 0 {
		p.lossEMA = loss
	} else {
		p.lossEMA = 0.9*p.lossEMA + 0.1*loss
	}
	p.nLoss++
	now := p.cfg.Now()
	el := now.Sub(p.start)
	rate := float64(p.samples) / el.Seconds()
	var eta time.Duration
	if done > 0 {
		eta = time.Duration(float64(el) / float64(done) * float64(p.total-done))
	}
	extra := p.barMetrics(step, metrics)
	if p.tty {
		if now.Sub(p.last) < 100*time.Millisecond && done < p.total {
			return
		}
		p.last = now
		width := 24
		fill := width * done / max(p.total, 1)
		// Epochs count from 0 everywhere (Lightning's numbering: logs,
		// checkpoint names, callbacks); the bar shows the last one's index.
		last := "?"
		if p.epochs > 0 {
			last = fmt.Sprint(p.epochs - 1)
		}
		line := fmt.Sprintf("\rEpoch %d/%s [%s%s] %d/%d loss=%.4f%s %.0f samples/s ETA %s ",
			p.epoch, last, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), done, p.total,
			p.lossEMA, extra, rate, eta.Round(time.Second))
		fmt.Fprint(p.w, line)
		return
	}
	every := max(p.cfg.LogEveryNSteps, 1)
	if done%every != 0 && done != p.total {
		return
	}
	p.cfg.Log.Info().Int("epoch", p.epoch).Int("batch", done).Int("of", p.total).
		Float64("loss", round4(p.lossEMA)).Float64("samples_per_s", float64(int(rate))).
		Str("eta", eta.Round(time.Second).String()).Msg("train" + extra)
}

func (p *progress) barMetrics(step []module.Metric, metrics map[string]float64) string {
	var b strings.Builder
	for _, m := range step {
		if m.Spec.ProgBar && m.Spec.OnStep {
			m.Values(func(name string, v float64) { fmt.Fprintf(&b, " %s=%.4f", name, v) })
		}
	}
	// Resource figures logged by callbacks.DeviceStatsMonitor.
	if v, ok := metrics["cpu_pct"]; ok {
		fmt.Fprintf(&b, " cpu=%.0f%%", v)
	}
	if v, ok := metrics["rss_mb"]; ok {
		fmt.Fprintf(&b, " rss=%.0fMB", v)
	}
	if v, ok := metrics["gpu_mem_mb"]; ok {
		fmt.Fprintf(&b, " gpu_mem=%.0fMB", v)
	}
	return b.String()
}

// validation logs the epoch's validation metrics on rank 0, with or without
// the progress display: they are the run's main result.
func (p *progress) validation(epoch int, vals map[string]float64) {
	if p == nil || !p.rank0 {
		return
	}
	if p.on && p.tty {
		fmt.Fprintln(p.w)
	}
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ev := p.cfg.Log.Info().Int("epoch", epoch)
	for _, k := range keys {
		ev = ev.Float64(k, round4(vals[k]))
	}
	ev.Msg("validation")
}

func (p *progress) done() {
	if p != nil && p.on && p.tty {
		fmt.Fprintln(p.w)
	}
}

// round4 rounds v to 4 decimals, half away from zero, in floating point: an
// integer conversion would print NaN, infinities and a diverging loss
// (|v| above 9.2e14) as -922337203685477.6.
func round4(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) >= 1e15 {
		return v // no decimals left to round (v*1e4 may overflow)
	}
	return math.Round(v*1e4) / 1e4
}
