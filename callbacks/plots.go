package callbacks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/plot"
	"github.com/fulgur-ml/fulgur/trainer"
)

// PlotsConfig configures a Plots callback.
type PlotsConfig struct {
	// Dir is the run directory, where a CSVLogger writes metrics.csv (and
	// hparams.yaml): charts go in Dir/plots, the report in Dir/report.md.
	// Required; usually CSVLogger.Dir(), or with the default logger the
	// Fit's run directory chosen before it: dir, err :=
	// trainer.VersionDir(root, ""), given as trainer.Config.LogDir too
	// (under ddp every rank, and in an elastic job every restart, names
	// the same one).
	Dir string
	// Title names the run in the report. "": the run directory's name
	// ("mlp/version_3").
	Title string
	// Config is the run's configuration shown in the report: a struct (or
	// pointer to one), such as the program's flags or its trainer.Config,
	// whose scalar fields are listed. nil: no configuration section.
	Config any
	// Strategy names the strategy in the report. "": not shown.
	Strategy string
	// ProfileReport writes the profiler's report (a profiler's Report
	// method, such as (*profiler.Simple).Report); its text goes in the
	// report. nil: no profiler section.
	ProfileReport func(w io.Writer) error
	// CheckpointDirs are searched for checkpoints (*.ckpt, *.safetensors)
	// to link from the report. nil: Dir/checkpoints and
	// <RootDir>/checkpoints.
	CheckpointDirs []string
	// Options tune the charts (size, formats, smoothing).
	Options plot.Options
	// Now stamps the report. nil: time.Now.
	Now func() time.Time
}

// Validate fills defaults and reports every problem at once.
func (c *PlotsConfig) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("Plots Dir is empty: pass the run directory the CSVLogger writes (CSVLogger.Dir())"))
	}
	if err := c.Options.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Plots %w", err))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return errors.Join(errs...)
}

// Plots draws the run's metrics (from Dir/metrics.csv) as PNG and SVG
// charts into Dir/plots at the end of Fit, and writes Dir/report.md:
// configuration and hyperparameters, world size and strategy, final and
// best metrics, test results, the profiler table, links to the charts and
// checkpoints. After an elastic restart the charts and metrics cover the
// whole run (metrics.csv keeps every attempt's rows) but the profiler
// table only the last attempt, the process that writes the report. It
// runs on rank 0 only, and not in fast-dev runs (which keep no
// artefacts). After a Test it writes the report again with the
// test metrics. A Fit that trains no step (resumed from a checkpoint with
// nothing left to train) draws nothing in a run directory without a
// metrics.csv, and says so. A run that fails or is interrupted gets no
// charts from Plots; draw them with "fulgur plot RUN_DIR".
type Plots struct {
	cfg      PlotsConfig
	files    []string
	rootDir  string
	world    int
	results  map[string]float64
	hist     *plot.History
	finished bool
	// startStep is the global step the Fit started at (a resumed one's
	// checkpoint's).
	startStep int
}

var (
	_ trainer.FitStartHook = (*Plots)(nil)
	_ trainer.FitEndHook   = (*Plots)(nil)
	_ trainer.TestEndHook  = (*Plots)(nil)
	_ trainer.ReadyChecker = (*Plots)(nil)
)

// NewPlots validates cfg and returns the callback.
func NewPlots(cfg PlotsConfig) (*Plots, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Plots{cfg: cfg}, nil
}

func (p *Plots) Name() string { return "Plots" }

// CheckReady refuses a Plots not made by NewPlots (trainer.ReadyChecker).
func (p *Plots) CheckReady() error {
	if p.cfg.Dir == "" { // PlotsConfig.Validate refuses it
		return literal("NewPlots", "has no Dir to read metrics.csv from and draw into")
	}
	return nil
}

// PlotsDir is the directory of the charts.
func (p *Plots) PlotsDir() string { return filepath.Join(p.cfg.Dir, "plots") }

// ReportPath is the report's file.
func (p *Plots) ReportPath() string { return filepath.Join(p.cfg.Dir, "report.md") }

// Files are the charts written, relative to PlotsDir.
func (p *Plots) Files() []string { return append([]string(nil), p.files...) }

func (p *Plots) OnFitStart(ctx context.Context, s *trainer.State) error {
	p.startStep = s.GlobalStep
	return nil
}

func (p *Plots) OnFitEnd(ctx context.Context, s *trainer.State) error {
	if !s.IsGlobalZero || s.FastDevRun {
		return nil
	}
	p.rootDir, p.world, p.finished = s.RootDir, s.WorldSize, true
	if _, err := plot.FindMetrics(p.cfg.Dir); err != nil && s.Metrics.Len() == 0 {
		// Nothing was logged, so no logger wrote a metrics.csv: the run
		// trained, and there is nothing to draw.
		p.finished = false
		s.Warn("Plots: the fit logged no metrics (no s.Log in the module's steps), so there is no metrics.csv to draw: no charts and no report")
		return nil
	}
	if _, err := plot.FindMetrics(p.cfg.Dir); err != nil && s.ResumedFrom != "" && s.GlobalStep == p.startStep {
		// Resumed into a new run directory from a checkpoint with nothing
		// left to train: no step ran, so nothing was logged here.
		p.finished = false
		s.Warn("Plots: the fit resumed from " + s.ResumedFrom + " trained no step, so this run directory has no metrics.csv to draw: no charts and no report (the run that wrote the checkpoint has them)")
		return nil
	}
	h, _, err := plot.ReadRun(p.cfg.Dir)
	if err != nil {
		return fmt.Errorf("%w (add a CSVLogger writing into the Plots directory)", err)
	}
	p.hist = h
	files, err := plot.WriteCharts(p.PlotsDir(), []*plot.History{h}, p.cfg.Options)
	if err != nil {
		return err
	}
	// Per-rank resource figures (DeviceStatsMonitor with a Dir), one line
	// per rank.
	ranks, err := plotsRankStats(p.cfg.Dir)
	if err != nil {
		return err
	}
	if len(ranks) > 0 {
		opt := p.cfg.Options
		opt.Prefix = "ranks_"
		more, err := plot.WriteCharts(p.PlotsDir(), ranks, opt)
		if err != nil {
			return err
		}
		files = append(files, more...)
	}
	p.files = files
	return p.writeReport()
}

// OnTestEnd adds the test metrics to the report of the fit before it.
func (p *Plots) OnTestEnd(ctx context.Context, s *trainer.State) error {
	if !s.IsGlobalZero || !p.finished {
		return nil
	}
	p.results = map[string]float64{}
	for k, v := range s.Metrics.All() {
		if strings.HasPrefix(k, "test") {
			p.results[k] = v
		}
	}
	return p.writeReport()
}

func (p *Plots) writeReport() error {
	hp, err := plot.ReadHParams(filepath.Join(p.cfg.Dir, plot.HParamsFile))
	if err != nil {
		return err
	}
	title := p.cfg.Title
	if title == "" {
		title = plot.RunLabel(p.cfg.Dir)
	}
	r := plot.Report{
		Title: title, Status: "success", Written: p.cfg.Now(), WorldSize: p.world, Strategy: p.cfg.Strategy,
		HParams: hp, History: p.hist, Results: p.results,
	}
	if p.cfg.Config != nil {
		r.Config = plot.StructFields(p.cfg.Config)
	}
	if p.cfg.ProfileReport != nil {
		var b bytes.Buffer
		if err := p.cfg.ProfileReport(&b); err != nil {
			return fmt.Errorf("profiler report: %w", err)
		}
		r.Profile = b.String()
	}
	for _, f := range p.files {
		r.Plots = append(r.Plots, "plots/"+f)
	}
	if r.Checkpoints, err = p.checkpoints(); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := r.WriteMarkdown(&b); err != nil {
		return err
	}
	return plotsWriteFile(p.ReportPath(), b.Bytes())
}

// checkpoints lists checkpoint files, relative to Dir with forward slashes.
func (p *Plots) checkpoints() ([]string, error) {
	dirs := p.cfg.CheckpointDirs
	if dirs == nil {
		dirs = []string{filepath.Join(p.cfg.Dir, "checkpoints")}
		if p.rootDir != "" {
			dirs = append(dirs, filepath.Join(p.rootDir, "checkpoints"))
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoints in %s: %w", d, err)
		}
		var names []string
		for _, e := range ents {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".ckpt" || ext == ".safetensors") {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			abs, err := filepath.Abs(filepath.Join(d, n))
			if err != nil || seen[abs] {
				continue
			}
			seen[abs] = true
			rel := filepath.Join(d, n)
			if base, err := filepath.Abs(p.cfg.Dir); err == nil {
				if r, err := filepath.Rel(base, abs); err == nil {
					rel = r
				}
			}
			out = append(out, filepath.ToSlash(rel))
		}
	}
	return out, nil
}

// plotsRankStats reads the device_stats_rank<R>.csv files in dir, labelled
// "rank R", in rank order.
func plotsRankStats(dir string) ([]*plot.History, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "device_stats_rank*.csv"))
	if err != nil {
		return nil, err
	}
	type ranked struct {
		r int
		h *plot.History
	}
	var rs []ranked
	for _, path := range paths {
		var r int
		if _, err := fmt.Sscanf(filepath.Base(path), "device_stats_rank%d.csv", &r); err != nil {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		h, err := plot.ReadCSV(f, path)
		f.Close()
		if err != nil {
			return nil, err
		}
		h.Label = fmt.Sprintf("rank %d", r)
		rs = append(rs, ranked{r, h})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].r < rs[j].r })
	out := make([]*plot.History, len(rs))
	for i, x := range rs {
		out[i] = x.h
	}
	return out, nil
}

// plotsWriteFile writes b to a temporary file beside path and renames it
// over path, so a reader never sees half a report.
func plotsWriteFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	if cerr := tmp.Close(); werr == nil {
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
