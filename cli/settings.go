package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Settings are the Trainer's flags (the trainer: section of a config
// file), with what the run leaves behind: loggers, checkpoints, profiles.
// A program gives its defaults in App.Trainer; a zero field takes the
// default in its tag.
type Settings struct {
	MaxEpochs           int    `flag:"max-epochs" check:">=-1" help:"stop after this many epochs (0 with -max-steps 0: 1000; -1: no limit)"`
	MaxSteps            int    `flag:"max-steps" check:">=0" help:"stop after this many optimizer steps (0: no limit)"`
	MinEpochs           int    `flag:"min-epochs" check:">=0" help:"train at least this many epochs before a stop (early stopping, -max-time) takes effect (0: no minimum)"`
	MinSteps            int    `flag:"min-steps" check:">=0" help:"train at least this many optimizer steps before a stop takes effect (0: no minimum)"`
	Devices             int    `flag:"devices" default:"1" check:">=-1" help:"devices (processes or replicas) per node; -1 for all"`
	NumNodes            int    `flag:"num-nodes" default:"1" check:">=1" help:"number of machines"`
	Strategy            string `flag:"strategy" default:"auto" help:"auto, single, dp, ddp, ddp_spawn, sharded, sharded_stage1, sharded_stage2, fsdp or fsdp_hybrid_shard"`
	Accelerator         string `flag:"accelerator" default:"cpu" help:"cpu, cuda or auto"`
	LimitTrainBatches   int    `flag:"limit-train-batches" check:">=0" help:"training batches per epoch (0: all)"`
	LimitValBatches     int    `flag:"limit-val-batches" check:">=0" help:"validation batches (0: all)"`
	LimitTestBatches    int    `flag:"limit-test-batches" check:">=0" help:"test batches (0: all)"`
	LimitPredictBatches int    `flag:"limit-predict-batches" check:">=0" help:"predict batches (0: all)"`
	// FastDevRun may be given bare, as Lightning's fast_dev_run=True.
	FastDevRun      Count  `flag:"fast-dev-run" help:"run this many batches of train, validation and test as a smoke test; bare: 1"`
	OverfitBatches  int    `flag:"overfit-batches" check:">=0" help:"train, validate and test on the first N batches of each loader, in order, every epoch: a model that cannot fit them has a bug (0: off)"`
	NumSanityVal    int    `flag:"num-sanity-val-steps" default:"2" check:">=-1" help:"validation batches run before training to catch a broken validation step early (0: none, -1: all)"`
	Seed            uint64 `flag:"seed" help:"seed for initialisation, shuffling and dropout"`
	Deterministic   bool   `flag:"deterministic" help:"bitwise-reproducible run for a given seed"`
	SyncBatchNorm   bool   `flag:"sync-batchnorm" help:"reduce BatchNorm batch statistics across all replicas (SyncBatchNorm)"`
	RootDir         string `flag:"root-dir" help:"directory for logs and checkpoints (\"\": the current one)"`
	CkptPath        string `flag:"ckpt-path" help:"fit: resume from it; validate, test, predict: evaluate it. A file, \"last\" (the newest under -root-dir) or \"best\""`
	Weights         string `flag:"weights" help:"fit: start from the weights of this file, with a fresh optimizer at epoch 0 (fine-tuning): a safetensors state dict PyTorch wrote, infer.SaveStateDict's, or a checkpoint (\"last\", \"best\" too), its optimizer and position ignored"`
	CkptEveryNSteps int    `flag:"ckpt-every-n-steps" check:">=0" help:"save a checkpoint every this many steps (0: at epoch ends)"`
	// ShardedCheckpoint: fsdp's ranks save their shards, never gathered
	// onto rank 0 (trainer.Config.ShardedCheckpoint).
	ShardedCheckpoint     bool    `flag:"sharded-checkpoint" help:"each rank saves only the state it holds, to PATH.rank<R>-of-<N> beside an index at PATH (fsdp: nothing gathered onto rank 0); any world size resumes from it"`
	Profiler              string  `flag:"profiler" help:"simple, advanced or timeline (default: none)"`
	Precision             string  `flag:"precision" default:"32" choices:"32,64" help:"32 or 64"`
	AccumulateGrad        int     `flag:"accumulate-grad-batches" default:"1" check:">=1" help:"batches per optimizer step"`
	GradientClipVal       float64 `flag:"gradient-clip-val" check:">=0" help:"clip the gradients to this, by -gradient-clip-algorithm (0: off)"`
	GradientClipAlgorithm string  `flag:"gradient-clip-algorithm" default:"norm" choices:"norm,value" help:"norm: scale the gradients so that their global L2 norm is at most -gradient-clip-val; value: clamp each element to ±-gradient-clip-val"`
	LogGradNorm           bool    `flag:"log-grad-norm" help:"log grad_norm, the global L2 norm of each step's gradients before clipping, with the step metrics (one more pass over the gradients per step)"`
	// CheckValEveryNEpoch and ValCheckInterval: when validation runs.
	CheckValEveryNEpoch int  `flag:"check-val-every-n-epoch" default:"1" check:">=1" help:"validate at the end of every this many epochs"`
	ValCheckInterval    int  `flag:"val-check-interval" check:">=0" help:"also validate every this many training batches within an epoch that validates (0: at the epoch's end only)"`
	LogEveryNSteps      int  `flag:"log-every-n-steps" default:"50" check:">=1" help:"record step metrics every this many steps"`
	WarnOnNaN           bool `flag:"warn-on-nan" help:"a NaN or infinite training loss is logged as a warning and training goes on (default: it stops training with an error saying where)"`
	DetectAnomaly       bool `flag:"detect-anomaly" help:"check every gradient after each backward pass and stop at the first NaN or infinite value, naming the parameter (slower)"`
	NoProgressBar       bool `flag:"no-progress-bar" help:"no progress bar or periodic progress lines"`

	// The options of trainer.WithWeights for -weights.
	WeightsStripPrefix string `flag:"weights-strip-prefix" help:"fit -weights: first remove this prefix from the file's tensor names that have it, such as module. for the state_dict() of a model wrapped in DistributedDataParallel (PyTorch's consume_prefix_in_state_dict_if_present)"`
	WeightsOnlyPrefix  string `flag:"weights-only-prefix" help:"fit -weights: load only the tensors whose names start with this, such as fc1. (after -weights-strip-prefix); the model's others keep their initial values"`
	WeightsNotStrict   bool   `flag:"weights-not-strict" help:"fit -weights: skip the tensors that do not match by name, the model's keeping their initial values (PyTorch's strict=False); both lists are logged"`

	Loggers        string        `flag:"loggers" default:"csv,tensorboard" help:"comma-separated loggers writing into ROOT/lightning_logs/version_N: csv, tensorboard, jsonl, or none"`
	CkptMonitor    string        `flag:"ckpt-monitor" help:"metric that ranks checkpoints, such as val_loss (default: keep the newest)"`
	CkptMode       string        `flag:"ckpt-mode" default:"min" choices:"min,max" help:"min or max: whether a lower or a higher -ckpt-monitor is better"`
	CkptTopK       int           `flag:"ckpt-top-k" default:"1" check:">=-1" help:"checkpoints to keep besides last.ckpt (-1: all)"`
	NoCheckpoint   bool          `flag:"no-checkpoint" help:"write no checkpoints during training (SIGINT and SIGTERM still save one)"`
	MaxTime        time.Duration `flag:"max-time" check:">=0" help:"stop training after this much wall-clock time, such as 1h30m (0: no limit)"`
	NoModelSummary bool          `flag:"no-model-summary" help:"do not print the model summary table at the start"`
	NoPlots        bool          `flag:"no-plots" help:"draw no charts (plots/) and no report.md in the run directory"`
	Predictions    string        `flag:"predictions" help:"predict: write each prediction as a JSON array, one line each, to this file"`
}

// Count is an integer flag that may be given bare: "-fast-dev-run" is 1,
// "-fast-dev-run=N" and "-fast-dev-run N" are N.
type Count int

func (c *Count) String() string {
	if c == nil {
		return "0"
	}
	return strconv.Itoa(int(*c))
}

// Set parses a count, or true (1) and false (0).
func (c *Count) Set(s string) error {
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
		return fmt.Errorf("give no value (1), or a count of 0 or more")
	}
	*c = Count(n)
	return nil
}

// Get returns the count as an int.
func (c *Count) Get() any { return int(*c) }

// IsBoolFlag lets the flag be given bare.
func (c *Count) IsBoolFlag() bool { return true }

var loggerNames = []string{"csv", "tensorboard", "jsonl"}

// validate reports the problems no single field's tag can see.
func (s *Settings) validate() []error {
	var errs []error
	if _, err := s.loggerList(); err != nil {
		errs = append(errs, err)
	}
	if s.Devices == 0 {
		// trainer.Config's zero value means 1, but a 0 written on the
		// command line is a mistake, as Lightning's devices=0 is.
		errs = append(errs, errors.New("-devices is 0: use 1 or more, or -1 for all"))
	}
	if s.CkptTopK == 0 && !s.NoCheckpoint {
		errs = append(errs, fmt.Errorf("-ckpt-top-k is 0: use 1 or more, or -1 for all (or -no-checkpoint)"))
	}
	if s.CkptTopK > 1 && s.CkptMonitor == "" {
		errs = append(errs, fmt.Errorf("-ckpt-top-k is %d but -ckpt-monitor is empty: ranking needs a metric such as val_loss (-ckpt-monitor step -ckpt-mode max keeps the newest %d)", s.CkptTopK, s.CkptTopK))
	}
	if s.Weights == "" {
		if s.WeightsStripPrefix != "" {
			errs = append(errs, fmt.Errorf("-weights-strip-prefix %s without -weights: it renames the tensors of the -weights file; give -weights FILE too", s.WeightsStripPrefix))
		}
		if s.WeightsOnlyPrefix != "" {
			errs = append(errs, fmt.Errorf("-weights-only-prefix %s without -weights: it picks tensors of the -weights file; give -weights FILE too", s.WeightsOnlyPrefix))
		}
		if s.WeightsNotStrict {
			errs = append(errs, errors.New("-weights-not-strict without -weights: it skips tensors of the -weights file; give -weights FILE too"))
		}
	}
	if h := lightningValueHint("strategy", s.Strategy); h != "" {
		// Before the trainer's own check, which lists our names only.
		errs = append(errs, fmt.Errorf("-strategy is %q: %s", s.Strategy, h))
	}
	if s.Profiler != "" && s.Profiler != "none" {
		if _, ok := Profilers[s.Profiler]; !ok {
			errs = append(errs, fmt.Errorf("-profiler is %q: use one of %s, or none", s.Profiler, strings.Join(profilerNames(), ", ")))
		}
	}
	return errs
}

func (s *Settings) loggerList() ([]string, error) {
	if s.Loggers == "" || s.Loggers == "none" {
		return nil, nil
	}
	var out []string
	for _, n := range strings.Split(s.Loggers, ",") {
		n = strings.TrimSpace(n)
		ok := false
		for _, k := range loggerNames {
			ok = ok || n == k
		}
		if !ok {
			err := fmt.Errorf("-loggers names %q: use a comma-separated list of %s, or none", n, strings.Join(loggerNames, ", "))
			if h := lightningValueHint("loggers", s.Loggers); h != "" {
				err = fmt.Errorf("%w; %s", err, h)
			}
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// weightsOptions are the trainer.WeightsOptions of the -weights- flags.
func (s *Settings) weightsOptions() []trainer.WeightsOption {
	var opts []trainer.WeightsOption
	if s.WeightsStripPrefix != "" {
		opts = append(opts, trainer.StripPrefix(s.WeightsStripPrefix))
	}
	if s.WeightsOnlyPrefix != "" {
		opts = append(opts, trainer.OnlyPrefix(s.WeightsOnlyPrefix))
	}
	if s.WeightsNotStrict {
		opts = append(opts, trainer.Strict(false))
	}
	return opts
}

// configFlags maps the trainer.Config fields a command line sets (through
// Settings.trainerConfig and setupRun) to the flags that set them, for
// settingName. A field the command line cannot set is not here: an error
// naming it is for the program's author, by its Go name.
var configFlags = map[string]string{
	"MaxEpochs": "-max-epochs", "MaxSteps": "-max-steps", "MinEpochs": "-min-epochs", "MinSteps": "-min-steps",
	"LimitTrainBatches": "-limit-train-batches", "LimitValBatches": "-limit-val-batches",
	"LimitTestBatches": "-limit-test-batches", "LimitPredictBatches": "-limit-predict-batches",
	"NumSanityValSteps": "-num-sanity-val-steps", "DisableSanityCheck": "-num-sanity-val-steps 0",
	"OverfitBatches": "-overfit-batches", "FastDevRun": "-fast-dev-run",
	"AccumulateGradBatches": "-accumulate-grad-batches", "GradientClipVal": "-gradient-clip-val",
	"GradientClipAlgorithm": "-gradient-clip-algorithm", "LogGradNorm": "-log-grad-norm",
	"CheckValEveryNEpoch": "-check-val-every-n-epoch", "ValCheckInterval": "-val-check-interval",
	"Seed": "-seed", "Deterministic": "-deterministic", "SyncBatchNorm": "-sync-batchnorm",
	"LogEveryNSteps": "-log-every-n-steps", "Precision": "-precision", "ShardedCheckpoint": "-sharded-checkpoint",
	"WarnOnNaN": "-warn-on-nan", "DetectAnomaly": "-detect-anomaly",
	"Devices": "-devices", "NumNodes": "-num-nodes", "Strategy": "-strategy", "Accelerator": "-accelerator",
	// The run directory, and LogDir inside it, come from -root-dir.
	"DefaultRootDir": "-root-dir", "LogDir": "-root-dir",
	// The -weights- flags' options, where an error names the option
	// itself; settingName adds an argument.
	"trainer.StripPrefix": "-weights-strip-prefix", "trainer.OnlyPrefix": "-weights-only-prefix",
	"trainer.Strict(false)": "-weights-not-strict",
}

// settingName is the cli's trainer.Config.SettingName: the flag for a
// Config field or a WeightsOption (`trainer.StripPrefix("module.")` is
// "-weights-strip-prefix module."), "" for what no flag sets. The trainer
// and the strategies call it as they write an error or a log line, so a
// module's own error that the trainer wraps is never rewritten.
func settingName(setting string) string {
	if f, ok := configFlags[setting]; ok {
		return f
	}
	fn, arg, ok := strings.Cut(setting, "(")
	if q, closed := strings.CutSuffix(arg, ")"); ok && closed && configFlags[fn] != "" {
		if v, err := strconv.Unquote(q); err == nil {
			return configFlags[fn] + " " + v
		}
	}
	return ""
}

// root is the root directory, "." when none was given.
func (s *Settings) root() string {
	if s.RootDir == "" {
		return "."
	}
	return s.RootDir
}

// TrainerConfig turns the settings into a trainer.Config (not yet
// validated; trainer.New does that), without the loggers and callbacks that Run
// adds for the run directory.
func (s *Settings) TrainerConfig() (trainer.Config, error) {
	cfg := s.trainerConfig()
	prof, err := newProfiler(s.Profiler, filepath.Join(s.root(), "profiles"))
	cfg.Profiler = prof
	return cfg, err
}

// trainerConfig is TrainerConfig without the profiler, which App.Run
// builds once it knows the run directory.
func (s *Settings) trainerConfig() trainer.Config {
	return trainer.Config{
		MaxEpochs: s.MaxEpochs, MaxSteps: s.MaxSteps, MinEpochs: s.MinEpochs, MinSteps: s.MinSteps,
		LimitTrainBatches: s.LimitTrainBatches, LimitValBatches: s.LimitValBatches,
		LimitTestBatches: s.LimitTestBatches, LimitPredictBatches: s.LimitPredictBatches,
		NumSanityValSteps: s.NumSanityVal, DisableSanityCheck: s.NumSanityVal == 0, OverfitBatches: s.OverfitBatches,
		FastDevRun: int(s.FastDevRun), AccumulateGradBatches: s.AccumulateGrad, GradientClipVal: s.GradientClipVal,
		GradientClipAlgorithm: s.GradientClipAlgorithm, LogGradNorm: s.LogGradNorm,
		CheckValEveryNEpoch: s.CheckValEveryNEpoch, ValCheckInterval: s.ValCheckInterval,
		Seed: s.Seed, Deterministic: s.Deterministic, SyncBatchNorm: s.SyncBatchNorm, LogEveryNSteps: s.LogEveryNSteps,
		DefaultRootDir: s.RootDir, Precision: s.Precision, ShardedCheckpoint: s.ShardedCheckpoint,
		Devices: s.Devices, NumNodes: s.NumNodes, Strategy: s.Strategy, Accelerator: s.Accelerator,
		EnableProgressBar: trainer.Bool(!s.NoProgressBar), WarnOnNaN: s.WarnOnNaN, DetectAnomaly: s.DetectAnomaly,
		SettingName: settingName,
	}
}

// Profilers maps -profiler names to constructors, given the directory for
// their files: ROOT/profiles for TrainerConfig; for App's commands
// ROOT/profiles/version_N when the command has a run directory
// ROOT/lightning_logs/version_N, so that each run keeps its own (Lightning's
// profilers write into the run's log directory). A program may add its own
// before calling Main.
var Profilers = map[string]func(dir string) (profiler.Profiler, error){
	"simple": func(string) (profiler.Profiler, error) { return profiler.NewSimple(), nil },
	"advanced": func(dir string) (profiler.Profiler, error) {
		return profiler.NewAdvanced(profiler.AdvancedConfig{Dir: dir, Rank: processRank()})
	},
	"timeline": func(dir string) (profiler.Profiler, error) {
		return profiler.NewTimeline(profiler.TimelineConfig{Dir: dir, Rank: processRank()})
	},
}

func profilerNames() []string {
	names := make([]string, 0, len(Profilers))
	for k := range Profilers {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func newProfiler(name, dir string) (profiler.Profiler, error) {
	if name == "" || name == "none" {
		return nil, nil
	}
	mk, ok := Profilers[name]
	if !ok {
		return nil, fmt.Errorf("-profiler is %q: use one of %s, or none", name, strings.Join(profilerNames(), ", "))
	}
	return mk(dir)
}

// processRank is this process's rank as its launcher set it (0 when none).
func processRank() int {
	env, _, err := cluster.Detect(cluster.OSLookup)
	if err != nil {
		return 0
	}
	return env.Rank
}
