// Package cli holds the command-line shape shared by every example and cmd/
// program: flags that mirror trainer.Config, the data-set flag, and the JSON
// summary line printed last on stdout.
package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Flags are the common flags. Programs add their own beside them.
type Flags struct {
	MaxEpochs             int
	MaxSteps              int
	Devices               int
	NumNodes              int
	Strategy              string
	Accelerator           string
	BatchSize             int
	LR                    float64
	LimitTrainBatches     int
	LimitValBatches       int
	LimitTestBatches      int
	FastDevRun            int
	Seed                  uint64
	Deterministic         bool
	SyncBatchNorm         bool
	Data                  string
	RootDir               string
	CkptPath              string
	CkptEveryNSteps       int
	Profiler              string
	Precision             string
	AccumulateGradBatches int
	GradientClipVal       float64
	LogEveryNSteps        int
	NoProgressBar         bool

	// Run outputs (runs.go).
	Loggers        string
	CkptMonitor    string
	CkptMode       string
	CkptTopK       int
	NoCheckpoint   bool
	MaxTime        time.Duration
	NoModelSummary bool
}

// Register defines the common flags on fs with the program's defaults.
func (f *Flags) Register(fs *flag.FlagSet, defaults Flags) {
	*f = defaults
	fs.IntVar(&f.MaxEpochs, "max-epochs", defaults.MaxEpochs, "stop after this many epochs")
	fs.IntVar(&f.MaxSteps, "max-steps", defaults.MaxSteps, "stop after this many optimizer steps (0: no limit)")
	fs.IntVar(&f.Devices, "devices", max(defaults.Devices, 1), "devices (processes or replicas) per node; -1 for all")
	fs.IntVar(&f.NumNodes, "num-nodes", max(defaults.NumNodes, 1), "number of machines")
	fs.StringVar(&f.Strategy, "strategy", "auto", "auto, single, dp, ddp, ddp_spawn or sharded")
	fs.StringVar(&f.Accelerator, "accelerator", "cpu", "cpu, cuda or auto")
	fs.IntVar(&f.BatchSize, "batch-size", defaults.BatchSize, "examples per batch (per rank)")
	fs.Float64Var(&f.LR, "lr", defaults.LR, "learning rate")
	fs.IntVar(&f.LimitTrainBatches, "limit-train-batches", 0, "training batches per epoch (0: all)")
	fs.IntVar(&f.LimitValBatches, "limit-val-batches", 0, "validation batches (0: all)")
	fs.IntVar(&f.LimitTestBatches, "limit-test-batches", 0, "test batches (0: all)")
	fs.Var((*countFlag)(&f.FastDevRun), "fast-dev-run", "run this many batches of train, validation and test as a smoke test; bare: 1")
	fs.Uint64Var(&f.Seed, "seed", defaults.Seed, "seed for initialisation, shuffling and dropout")
	fs.BoolVar(&f.Deterministic, "deterministic", false, "bitwise-reproducible run for a given seed")
	fs.BoolVar(&f.SyncBatchNorm, "sync-batchnorm", false, "reduce BatchNorm batch statistics across all replicas (SyncBatchNorm)")
	fs.StringVar(&f.Data, "data", "", "directory of the data set (default: installed copy, else the embedded subset)")
	fs.StringVar(&f.RootDir, "root-dir", defaults.RootDir, "directory for logs and checkpoints")
	fs.StringVar(&f.CkptPath, "ckpt-path", "", "checkpoint to resume from: a file, or \"last\" for the newest under the root dir")
	fs.IntVar(&f.CkptEveryNSteps, "ckpt-every-n-steps", 0, "save a checkpoint every this many steps (0: at epoch ends)")
	fs.StringVar(&f.Profiler, "profiler", "", "simple, advanced or timeline (default: none)")
	fs.StringVar(&f.Precision, "precision", "32", "32 or 64")
	fs.IntVar(&f.AccumulateGradBatches, "accumulate-grad-batches", 1, "batches per optimizer step")
	fs.Float64Var(&f.GradientClipVal, "gradient-clip-val", 0, "clip the gradient norm to this (0: off)")
	fs.IntVar(&f.LogEveryNSteps, "log-every-n-steps", 50, "record step metrics every this many steps")
	fs.BoolVar(&f.NoProgressBar, "no-progress-bar", false, "no progress bar or periodic progress lines")
	f.registerRun(fs)
}

// countFlag is an integer flag that may be given bare, as Lightning's
// fast_dev_run=True: "-fast-dev-run" means 1, "-fast-dev-run=N" and (through
// Parse) "-fast-dev-run N" mean N.
type countFlag int

func (c *countFlag) String() string {
	if c == nil {
		return "0"
	}
	return strconv.Itoa(int(*c))
}

func (c *countFlag) Set(s string) error {
	switch s {
	case "true":
		*c = 1
		return nil
	case "false":
		*c = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a count: give no value (1), or 0 or more", s)
	}
	*c = countFlag(n)
	return nil
}

func (c *countFlag) Get() any { return int(*c) }

func (c *countFlag) IsBoolFlag() bool { return true }

// Parse parses args into fs. A count flag that may be given bare
// (-fast-dev-run) also takes its value as the next argument when that is a
// number, "-fast-dev-run 5": Go's flag package would read a bare flag and
// then a stray argument "5".
func Parse(fs *flag.FlagSet, args []string) error {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" {
			out = append(out, args[i+1:]...)
			break
		}
		name := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || strings.Contains(name, "=") || i+1 == len(args) {
			continue
		}
		if fl := fs.Lookup(name); fl != nil {
			if _, ok := fl.Value.(*countFlag); ok {
				if _, err := strconv.Atoi(args[i+1]); err == nil {
					out[len(out)-1] = a + "=" + args[i+1]
					i++
				}
			}
		}
	}
	return fs.Parse(out)
}

// Validate reports every bad flag at once.
func (f *Flags) Validate() error {
	var errs []error
	if f.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("-batch-size is %d: use 1 or more", f.BatchSize))
	}
	if !(f.LR > 0) {
		errs = append(errs, fmt.Errorf("-lr is %g: use a positive learning rate", f.LR))
	}
	if f.CkptEveryNSteps < 0 {
		errs = append(errs, fmt.Errorf("-ckpt-every-n-steps is %d: use 0 or more", f.CkptEveryNSteps))
	}
	errs = append(errs, f.validateRun()...)
	return errors.Join(errs...)
}

// TrainerConfig turns the flags into a trainer.Config (not yet validated).
func (f *Flags) TrainerConfig() (trainer.Config, error) {
	prof, err := NewProfiler(f.Profiler, f.RootDir)
	if err != nil {
		return trainer.Config{}, err
	}
	return trainer.Config{
		MaxEpochs: f.MaxEpochs, MaxSteps: f.MaxSteps,
		LimitTrainBatches: f.LimitTrainBatches, LimitValBatches: f.LimitValBatches, LimitTestBatches: f.LimitTestBatches,
		FastDevRun: f.FastDevRun, AccumulateGradBatches: f.AccumulateGradBatches, GradientClipVal: f.GradientClipVal,
		Seed: f.Seed, Deterministic: f.Deterministic, SyncBatchNorm: f.SyncBatchNorm, LogEveryNSteps: f.LogEveryNSteps,
		DefaultRootDir: f.RootDir, Precision: f.Precision,
		Devices: f.Devices, NumNodes: f.NumNodes, Strategy: f.Strategy, Accelerator: f.Accelerator,
		Profiler: prof, EnableProgressBar: trainer.Bool(!f.NoProgressBar),
	}, nil
}

// Profilers maps -profiler names to constructors; packages that provide more
// profilers add to it.
var Profilers = map[string]func(dir string) (profiler.Profiler, error){
	"simple": func(string) (profiler.Profiler, error) { return profiler.NewSimple(), nil },
	"advanced": func(dir string) (profiler.Profiler, error) {
		return profiler.NewAdvanced(profiler.AdvancedConfig{Dir: filepath.Join(dir, "profiles"), Rank: processRank()})
	},
	"timeline": func(dir string) (profiler.Profiler, error) {
		return profiler.NewTimeline(profiler.TimelineConfig{Dir: filepath.Join(dir, "profiles"), Rank: processRank()})
	},
}

// NewProfiler builds the profiler called name ("" for none).
func NewProfiler(name, dir string) (profiler.Profiler, error) {
	if name == "" || name == "none" {
		return nil, nil
	}
	mk, ok := Profilers[name]
	if !ok {
		names := make([]string, 0, len(Profilers))
		for k := range Profilers {
			names = append(names, k)
		}
		return nil, fmt.Errorf("-profiler is %q: use one of %v", name, names)
	}
	return mk(dir)
}

// Summary is the JSON object printed last on stdout.
type Summary struct {
	Program          string  `json:"program"`
	TestAcc          float64 `json:"test_acc"`
	TestLoss         float64 `json:"test_loss"`
	TrainSamplesPerS float64 `json:"train_samples_per_s"`
	Epochs           int     `json:"epochs"`
	GlobalStep       int     `json:"global_step"`
	WorldSize        int     `json:"world_size"`
	Strategy         string  `json:"strategy"`
	WeightsSHA256    string  `json:"weights_sha256"`
	Data             string  `json:"data"`
	Seconds          float64 `json:"seconds"`
	Seed             uint64  `json:"seed"`
	// Interrupted runs (SIGINT, SIGTERM) stop after saving Checkpoint and
	// skip the test (test_acc and test_loss are -1).
	Interrupted bool   `json:"interrupted,omitempty"`
	Checkpoint  string `json:"checkpoint,omitempty"`
	RunDir      string `json:"run_dir,omitempty"`
}

// Print writes s as one JSON line.
func (s Summary) Print(w io.Writer) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// Fail prints err for a person and exits with status 1: no panic trace
// reaches the user.
func Fail(prog string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
	var ie *trainer.InterruptedError
	if errors.As(err, &ie) {
		// As a shell reports a process the signal killed (130 for
		// SIGINT, 143 for SIGTERM), though the run was saved.
		os.Exit(ie.ExitCode())
	}
	os.Exit(1)
}

// Since is the seconds elapsed from t0, rounded to milliseconds.
func Since(t0 time.Time) float64 {
	return float64(time.Since(t0).Milliseconds()) / 1000
}
