package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/plot"
)

func runPlot(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fulgur plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "directory for the charts (default: RUN_DIR/plots for one run; required for several)")
	formats := fs.String("format", "png,svg", "comma-separated file formats: png, svg, pdf, eps, jpg, tif")
	labels := fs.String("labels", "", "comma-separated legend names, one per run (default: each run's directory)")
	smoothing := fs.Float64("smoothing", 0, "weight of the moving average over long step series, below 1 (0: 0.6; negative: raw values only)")
	report := fs.Bool("report", false, "also write report.md (metrics, hyperparameters, charts) for a single run; replaces the report the run wrote")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: fulgur plot [flags] RUN_DIR [RUN_DIR...]\n\n"+
			"Draws every logged scalar of each run against step (and against epoch where logged\n"+
			"once per epoch): loss, accuracy, learning rate, resources, and any other metric.\n"+
			"A RUN_DIR holds metrics.csv, is the file, or holds lightning_logs/version_N (the newest with a metrics.csv).\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	dirs := fs.Args()
	if len(dirs) == 0 {
		fs.Usage()
		return errors.New("plot: no RUN_DIR given: pass the directory a run logged into, such as runs/mlp/lightning_logs/version_0")
	}
	for _, d := range dirs {
		if name, _, _ := strings.Cut(d, "="); strings.HasPrefix(d, "-") && fs.Lookup(strings.TrimLeft(name, "-")) != nil {
			// Go's flag package stops at the first RUN_DIR.
			return fmt.Errorf("plot: flag %s comes after a RUN_DIR: put the flags before the RUN_DIRs (fulgur plot [flags] RUN_DIR [RUN_DIR...])", d)
		}
	}
	opt := plot.Options{Smoothing: *smoothing}
	for _, f := range strings.Split(*formats, ",") {
		if f = strings.ToLower(strings.TrimSpace(f)); f != "" {
			opt.Formats = append(opt.Formats, f)
		}
	}
	if len(opt.Formats) == 0 {
		return errors.New("plot: -format is empty: use png, svg or both (png,svg)")
	}
	if err := opt.Validate(); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	var names []string
	if *labels != "" {
		names = strings.Split(*labels, ",")
		if len(names) != len(dirs) {
			return fmt.Errorf("plot: -labels names %d runs but %d RUN_DIRs were given: give one label per run", len(names), len(dirs))
		}
	}
	if len(dirs) > 1 && *out == "" {
		return fmt.Errorf("plot: %d runs are compared on shared charts: choose where they go with -o DIR", len(dirs))
	}
	if len(dirs) > 1 && *report {
		return errors.New("plot: -report describes one run: pass a single RUN_DIR, or drop -report")
	}
	var runs []*plot.History
	var files []string
	for i, d := range dirs {
		h, file, err := plot.ReadRun(d)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		if names != nil {
			h.Label = strings.TrimSpace(names[i])
		}
		runs = append(runs, h)
		files = append(files, file)
	}
	runDir := filepath.Dir(files[0])
	dest := *out
	if dest == "" {
		dest = filepath.Join(runDir, "plots")
	}
	written, err := plot.WriteCharts(dest, runs, opt)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	for _, f := range written {
		fmt.Fprintln(stdout, filepath.Join(dest, f))
	}
	if !*report {
		return nil
	}
	return writeReport(stdout, runDir, dest, *out == "", runs[0], written)
}

// writeReport writes report.md in the run directory when the charts went
// to its plots directory, else beside the charts.
func writeReport(stdout io.Writer, runDir, dest string, inRun bool, h *plot.History, charts []string) error {
	hp, err := plot.ReadHParams(filepath.Join(runDir, plot.HParamsFile))
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	where := dest
	if inRun {
		where = runDir
	}
	r := plot.Report{Title: plot.RunLabel(runDir), Written: time.Now(), HParams: hp, History: h}
	for _, c := range charts {
		rel, err := filepath.Rel(where, filepath.Join(dest, c))
		if err != nil {
			rel = filepath.Join(dest, c)
		}
		r.Plots = append(r.Plots, filepath.ToSlash(rel))
	}
	var b bytes.Buffer
	if err := r.WriteMarkdown(&b); err != nil {
		return err
	}
	path := filepath.Join(where, "report.md")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	fmt.Fprintln(stdout, path)
	return nil
}
