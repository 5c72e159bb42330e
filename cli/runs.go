package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/trainer"
)

// What a program leaves behind, like Lightning: the run directory
// ROOT/lightning_logs/version_N is the trainer's (trainer.Config.LogDir):
// the loggers write there, ModelCheckpoint (given no Dirpath) into its
// checkpoints/ directory (keeping last.ckpt and the -ckpt-top-k best), a
// run stopped by SIGINT or SIGTERM into checkpoints/interrupted.ckpt, and
// profilers into ROOT/profiles/version_N (ROOT/profiles for a command with
// no run directory). "-ckpt-path last" resumes from the newest
// last.ckpt or interrupted.ckpt under ROOT (trainer.ResolveCheckpoint).

// runOutputs are what setupRun added to a trainer.Config.
type runOutputs struct {
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

// writeHParams gives the hyperparameters to the loggers (rank 0 only);
// validate, test and predict call it once they have run, so a bad
// configuration or a checkpoint that does not load leaves no files. fit
// writes them from its OnFitStart instead (hparamsAtFitStart).
func (r runOutputs) writeHParams() error {
	if processRank() != 0 {
		return nil
	}
	return r.logHParams()
}

func (r runOutputs) logHParams() error {
	if len(r.hparams) == 0 {
		return nil
	}
	for _, l := range r.loggers {
		if err := l.LogHyperparams(r.hparams); err != nil {
			return fmt.Errorf("loggers/%s.LogHyperparams: %w", l.Name(), err)
		}
	}
	return nil
}

// hparamsAtFitStart writes the hyperparameters when Fit starts on the
// job's rank 0. A program run with FULGUR_MAX_RESTARTS under ddp's
// self-launch runs its code before Fit in a process that then only
// supervises the ranks: written before Fit, the hyperparameters made a run
// directory of their own there (version_0 holding hparams.yaml and an
// empty event file, the run itself in version_1).
type hparamsAtFitStart struct{ runs *runOutputs }

func (hparamsAtFitStart) Name() string { return "cli.hparams" }

func (h hparamsAtFitStart) OnFitStart(ctx context.Context, s *trainer.State) error {
	if !s.IsGlobalZero {
		return nil
	}
	if h.runs.RunDir != "" && filepath.Clean(s.LogDir) != filepath.Clean(h.runs.RunDir) {
		return fmt.Errorf("the run directory is %s but the loggers write into %s (was another run started in the same -root-dir at the same time?): start again", s.LogDir, h.runs.RunDir)
	}
	return h.runs.logHParams()
}

// setupRun adds the loggers, ModelCheckpoint, Timer and ModelSummary the
// flags ask for to cfg, keeps hparams (the flags) for WriteHParams, and
// resolves "-ckpt-path last" to the newest checkpoint under the
// root directory (starting fresh, with a warning, when there is none).
func (f *Settings) setupRun(cfg *trainer.Config, hparams map[string]any, training bool) (runOutputs, error) {
	out := runOutputs{hparams: hparams}
	root := f.root()
	// Resolved first, so a wrong path leaves no run directory behind.
	// Validate, Test and Predict resolve -ckpt-path themselves.
	w := cfg.Out
	if w == nil {
		w = os.Stderr
	}
	switch ckpt := f.CkptPath; {
	case !training || ckpt == "":
	case ckpt == trainer.CkptLast:
		p, err := trainer.ResolveCheckpoint(root, trainer.CkptLast)
		if err != nil {
			fmt.Fprintf(w, "-ckpt-path last: %v: starting from scratch\n", err)
			p = ""
		}
		out.CkptPath = p
	default:
		p, err := trainer.ResolveCheckpoint(root, ckpt)
		if err != nil {
			return out, fmt.Errorf("-ckpt-path %s: %w", f.CkptPath, err)
		}
		out.CkptPath = p
	}
	names, err := f.loggerList()
	if err != nil {
		return out, err
	}
	// The loggers are built before Fit (WriteHParams writes into the run
	// directory), so the run directory is chosen here and handed to the
	// trainer, which otherwise picks the same one itself.
	if len(names) > 0 || (training && !f.NoCheckpoint) {
		if out.RunDir = trainer.ElasticRunDir(); out.RunDir != "" { // a restarted elastic job goes on in its run
			cfg.LogDir = out.RunDir
		} else if out.RunDir, err = trainer.VersionDir(root, ""); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe // the file system's words, without trainer's function name
			}
			return out, fmt.Errorf("-root-dir %s: cannot make the run directory there (%w): give a directory this process can create and write", root, err)
		} else if !training {
			cfg.LogDir = out.RunDir
		}
		// Fit picks the same directory itself on rank 0, and every rank
		// takes rank 0's: named here, a rank that ddp started after rank 0
		// had made the directory (for its rank_N.log) chose the next
		// version, and wrote its shards of a sharded checkpoint there,
		// away from the index that names them. hparamsAtFitStart checks
		// that rank 0's loggers write into Fit's directory.
	}
	cfg.DisableLogger = len(names) == 0
	cfg.DisableCheckpointing = f.NoCheckpoint || !training
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
	if !f.NoModelSummary {
		ms, err := callbacks.NewModelSummary(w, 0)
		if err != nil {
			return out, err
		}
		cfg.Callbacks = append(cfg.Callbacks, ms)
	}
	if training && f.MaxTime > 0 {
		tm, err := callbacks.NewTimer(callbacks.TimerConfig{Duration: f.MaxTime})
		if err != nil {
			return out, err
		}
		cfg.Callbacks = append(cfg.Callbacks, tm)
	}
	if training && !f.NoCheckpoint {
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
	return out, nil
}

// hparams returns the flags' values by name ("batch_size": 64, ...), for
// the loggers' hyperparameters.
func hparams(fs *flag.FlagSet) map[string]any {
	h := map[string]any{}
	fs.VisitAll(func(fl *flag.Flag) {
		if fl.Name == "config" || fl.Name == "print-config" {
			return // how the settings were read, not what they are
		}
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

// perMachine are the flags that may differ between the machines of a job:
// paths, what rank 0 alone writes, and display.
var perMachine = map[string]bool{"root-dir": true, "data": true, "ckpt-path": true, "predictions": true,
	"profiler": true, "loggers": true, "no-progress-bar": true, "no-plots": true, "no-model-summary": true}

// sameOnEveryRank is the flags every rank of a job must have alike
// (trainer.Config.SameOnEveryRank), by name ("-batch-size": 64, ...): a
// Fit of several ranks fails naming the flag one rank was started with
// differently.
func sameOnEveryRank(fs *flag.FlagSet) map[string]any {
	s := map[string]any{}
	for k, v := range hparams(fs) {
		if name := strings.ReplaceAll(k, "_", "-"); !perMachine[name] {
			s["-"+name] = v
		}
	}
	return s
}

// closeProfiler flushes a profiler's files at the end of a program.
func closeProfiler(p profiler.Profiler) {
	if p != nil {
		if err := p.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "profiler: %v\n", err)
		}
	}
}
