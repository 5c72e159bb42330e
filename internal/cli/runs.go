package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/trainer"
)

// What an example leaves behind, like Lightning: the run directory
// ROOT/lightning_logs/version_N is the trainer's (trainer.Config.LogDir):
// the loggers write there, ModelCheckpoint (given no Dirpath) into its
// checkpoints/ directory (keeping last.ckpt and the -ckpt-top-k best), a
// run stopped by SIGINT or SIGTERM into checkpoints/interrupted.ckpt, and
// profilers into ROOT/profiles. "-ckpt-path last" resumes from the newest
// last.ckpt or interrupted.ckpt under ROOT (trainer.ResolveCheckpoint).

var loggerNames = []string{"csv", "tensorboard", "jsonl"}

func (f *Flags) registerRun(fs *flag.FlagSet) {
	fs.StringVar(&f.Loggers, "loggers", "csv,tensorboard", "comma-separated loggers writing into ROOT/lightning_logs/version_N: csv, tensorboard, jsonl, or none")
	fs.StringVar(&f.CkptMonitor, "ckpt-monitor", "", "metric that ranks checkpoints, such as val_loss (default: keep the newest)")
	fs.StringVar(&f.CkptMode, "ckpt-mode", "min", "min or max: whether a lower or a higher -ckpt-monitor is better")
	fs.IntVar(&f.CkptTopK, "ckpt-top-k", 1, "checkpoints to keep besides last.ckpt (-1: all)")
	fs.BoolVar(&f.NoCheckpoint, "no-checkpoint", false, "write no checkpoints during training (SIGINT and SIGTERM still save one)")
	fs.DurationVar(&f.MaxTime, "max-time", 0, "stop training after this much wall-clock time, such as 1h30m (0: no limit)")
	fs.BoolVar(&f.NoModelSummary, "no-model-summary", false, "do not print the model summary table at the start")
}

func (f *Flags) validateRun() []error {
	var errs []error
	if _, err := f.loggerList(); err != nil {
		errs = append(errs, err)
	}
	if f.CkptMode != "min" && f.CkptMode != "max" {
		errs = append(errs, fmt.Errorf("-ckpt-mode is %q: use min or max", f.CkptMode))
	}
	if f.CkptTopK < -1 || (f.CkptTopK == 0 && !f.NoCheckpoint) {
		errs = append(errs, fmt.Errorf("-ckpt-top-k is %d: use 1 or more, or -1 for all (or -no-checkpoint)", f.CkptTopK))
	}
	if f.CkptTopK > 1 && f.CkptMonitor == "" {
		errs = append(errs, fmt.Errorf("-ckpt-top-k is %d but -ckpt-monitor is empty: ranking needs a metric such as val_loss", f.CkptTopK))
	}
	if f.MaxTime < 0 {
		errs = append(errs, fmt.Errorf("-max-time is %v: use a positive duration such as 2h, or 0 for no limit", f.MaxTime))
	}
	return errs
}

func (f *Flags) loggerList() ([]string, error) {
	if f.Loggers == "" || f.Loggers == "none" {
		return nil, nil
	}
	var out []string
	for _, n := range strings.Split(f.Loggers, ",") {
		n = strings.TrimSpace(n)
		ok := false
		for _, k := range loggerNames {
			ok = ok || n == k
		}
		if !ok {
			return nil, fmt.Errorf("-loggers names %q: use a comma-separated list of %s, or none", n, strings.Join(loggerNames, ", "))
		}
		out = append(out, n)
	}
	return out, nil
}

// processRank is this process's rank as its launcher set it (0 when none).
func processRank() int {
	env, _, err := cluster.Detect(cluster.OSLookup)
	if err != nil {
		return 0
	}
	return env.Rank
}

// RunOutputs are what SetupRun added to a trainer.Config.
type RunOutputs struct {
	// RunDir is ROOT/lightning_logs/version_N, the trainer's LogDir ("" with
	// no logger and no checkpoints).
	RunDir string
	// Checkpoint is the ModelCheckpoint (nil with -no-checkpoint).
	Checkpoint *callbacks.ModelCheckpoint
	// CkptPath is the checkpoint to resume from, -ckpt-path resolved ("":
	// start fresh).
	CkptPath string

	loggers []trainer.Logger
	hparams map[string]any
}

// WriteHParams gives the hyperparameters to the loggers (rank 0 only); call
// it once the trainer is built, so a bad configuration leaves no files.
func (r RunOutputs) WriteHParams() error {
	if processRank() != 0 || len(r.hparams) == 0 {
		return nil
	}
	for _, l := range r.loggers {
		if err := l.LogHyperparams(r.hparams); err != nil {
			return fmt.Errorf("loggers/%s.LogHyperparams: %w", l.Name(), err)
		}
	}
	return nil
}

// SetupRun adds the loggers, ModelCheckpoint, Timer and ModelSummary the
// flags ask for to cfg, keeps hparams (the flags) for WriteHParams, and
// resolves "-ckpt-path last" to the newest checkpoint under the
// root directory (starting fresh, with a warning, when there is none).
func (f *Flags) SetupRun(cfg *trainer.Config, hparams map[string]any) (RunOutputs, error) {
	out := RunOutputs{hparams: hparams}
	root := f.RootDir
	if root == "" {
		root = "."
	}
	names, err := f.loggerList()
	if err != nil {
		return out, err
	}
	// The loggers are built before Fit (WriteHParams writes into the run
	// directory), so the run directory is chosen here and handed to the
	// trainer, which otherwise picks the same one itself.
	if len(names) > 0 || !f.NoCheckpoint {
		if out.RunDir = trainer.ElasticRunDir(); out.RunDir == "" { // a restarted elastic job goes on in its run
			if out.RunDir, err = trainer.VersionDir(root, ""); err != nil {
				return out, err
			}
		}
		cfg.LogDir = out.RunDir
	}
	cfg.DisableLogger = len(names) == 0
	cfg.DisableCheckpointing = f.NoCheckpoint
	for _, n := range names {
		var l trainer.Logger
		switch n {
		case "csv":
			l, err = callbacks.NewCSVLogger(out.RunDir)
		case "tensorboard":
			l, err = callbacks.NewTensorBoardLogger(out.RunDir, nil)
		case "jsonl":
			l, err = callbacks.NewJSONLLogger(out.RunDir)
		}
		if err != nil {
			return out, err
		}
		out.loggers = append(out.loggers, l)
		cfg.Loggers = append(cfg.Loggers, l)
	}
	w := cfg.Out
	if w == nil {
		w = os.Stderr
	}
	if !f.NoModelSummary {
		ms, err := callbacks.NewModelSummary(w, 0)
		if err != nil {
			return out, err
		}
		cfg.Callbacks = append(cfg.Callbacks, ms)
	}
	if f.MaxTime > 0 {
		tm, err := callbacks.NewTimer(callbacks.TimerConfig{Duration: f.MaxTime})
		if err != nil {
			return out, err
		}
		cfg.Callbacks = append(cfg.Callbacks, tm)
	}
	if !f.NoCheckpoint {
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{
			Monitor: f.CkptMonitor, Mode: f.CkptMode, SaveTopK: f.CkptTopK, SaveLast: true,
			EveryNTrainSteps: f.CkptEveryNSteps,
		})
		if err != nil {
			return out, err
		}
		out.Checkpoint = mc
		cfg.Callbacks = append(cfg.Callbacks, mc)
	}
	out.CkptPath = f.CkptPath
	if f.CkptPath == trainer.CkptLast {
		p, err := trainer.ResolveCheckpoint(root, trainer.CkptLast)
		if err != nil {
			fmt.Fprintf(w, "-ckpt-path last: %v: starting from scratch\n", err)
			p = ""
		}
		out.CkptPath = p
	} else if f.CkptPath != "" {
		if _, err := os.Stat(f.CkptPath); err != nil {
			return out, fmt.Errorf("-ckpt-path %s: %w: pass a checkpoint file, or last for the newest under -root-dir %s", f.CkptPath, errors.Unwrap(err), root)
		}
	}
	return out, nil
}

// HParams returns the flags' values by name ("batch_size": 64, ...), for
// the loggers' hyperparameters.
func HParams(fs *flag.FlagSet) map[string]any {
	h := map[string]any{}
	fs.VisitAll(func(fl *flag.Flag) {
		var v any = fl.Value.String()
		if g, ok := fl.Value.(flag.Getter); ok {
			v = g.Get()
		}
		if d, ok := v.(time.Duration); ok {
			v = d.String()
		}
		h[strings.ReplaceAll(fl.Name, "-", "_")] = v
	})
	return h
}

// closeProfiler flushes a profiler's files at the end of a program.
func closeProfiler(p profiler.Profiler) {
	if p != nil {
		if err := p.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "profiler: %v\n", err)
		}
	}
}
