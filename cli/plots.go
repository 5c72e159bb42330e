package cli

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/trainer"
)

// addPlots adds a DeviceStatsMonitor (CPU %, resident memory, every
// LogEveryNSteps steps, through the loggers) and a Plots callback (charts
// in RUN_DIR/plots and RUN_DIR/report.md at the end of Fit, test metrics
// added after Test) to cfg. It belongs after setupRun: it writes into the
// CSV logger's run directory, and adds nothing but the monitor when there
// is no CSV logger (-loggers without csv), saying so on w.
func addPlots(f *Settings, cfg *trainer.Config, w io.Writer) error {
	stats, err := callbacks.NewDeviceStatsMonitor(callbacks.DeviceStatsConfig{})
	if err != nil {
		return err
	}
	cfg.Callbacks = append(cfg.Callbacks, stats)
	var dir string
	for _, l := range cfg.Loggers {
		if c, ok := l.(*callbacks.CSVLogger); ok {
			dir = c.Dir()
		}
	}
	if dir == "" {
		fmt.Fprintf(w, "no charts or report.md: they are drawn from metrics.csv, which -loggers %q does not write (add csv to -loggers, or give -no-plots)\n", f.Loggers)
		return nil
	}
	root := f.root()
	// The run directory's (the CSV logger's), where ModelCheckpoint writes
	// without a Dirpath.
	ckpts := []string{filepath.Join(dir, "checkpoints"), filepath.Join(root, "checkpoints")}
	for _, cb := range cfg.Callbacks {
		if mc, ok := cb.(*callbacks.ModelCheckpoint); ok && mc.Config().Dirpath != "" {
			ckpts = append([]string{mc.Config().Dirpath}, ckpts...)
		}
	}
	// The flags are the run's hyperparameters (setupRun logs them to
	// hparams.yaml, which the report shows), so no Config section repeats
	// them.
	pc := callbacks.PlotsConfig{Dir: dir, Strategy: f.Strategy, CheckpointDirs: ckpts}
	// Only profilers whose Report is a side-effect-free table: the
	// timeline's Report merges the ranks' trace files, which must happen
	// once, after Fit.
	switch p := cfg.Profiler.(type) {
	case *profiler.Simple:
		pc.ProfileReport = p.Report
	case *profiler.Advanced:
		pc.ProfileReport = p.Report
	}
	plots, err := callbacks.NewPlots(pc)
	if err != nil {
		return err
	}
	cfg.Callbacks = append(cfg.Callbacks, plots)
	return nil
}
