package trainer

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"time"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/internal/typednil"
	"github.com/fulgur-ml/fulgur/panics"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

// Config configures a Trainer. Every field's zero value is a documented
// default; Validate fills them in and reports every problem at once.
type Config struct {
	// MaxEpochs stops training after this many epochs. 0: 1000 when MaxSteps
	// is 0 too (Lightning's default), unlimited otherwise; -1: unlimited
	// (Lightning's max_epochs=-1: training ends at MaxSteps, a Stop such as
	// a callbacks.Timer's, or a signal).
	MaxEpochs int
	// MaxSteps stops training after this many optimizer steps. 0: no limit.
	MaxSteps int
	// MinEpochs and MinSteps hold off a Stop that a callback or the module
	// asks for (EarlyStopping's, a Timer's) until this many epochs have
	// ended and this many optimizer steps have run, as Lightning's
	// min_epochs and min_steps: training goes on, and stops at the first
	// batch end or epoch end where both are met, with the epoch's end as
	// for any Stop. MaxEpochs and MaxSteps still end training; signals and
	// cancels are never held. 0: no minimum.
	MinEpochs int
	MinSteps  int
	// LimitTrainBatches, LimitValBatches, LimitTestBatches and
	// LimitPredictBatches cap the batches used per epoch. 0: all.
	LimitTrainBatches   int
	LimitValBatches     int
	LimitTestBatches    int
	LimitPredictBatches int
	// ValCheckInterval runs validation every this many training batches
	// within an epoch as well as at its end, in the epochs that
	// CheckValEveryNEpoch selects (as Lightning). 0: at the end of the
	// epoch only. Beside a ModelCheckpoint that saves after validation and
	// AccumulateGradBatches above 1 it must be a multiple of the latter: a
	// checkpoint cannot be saved inside an accumulation window.
	ValCheckInterval int
	// CheckValEveryNEpoch runs validation every this many epochs. 0: 1.
	// A per-epoch ReduceOnPlateau watching a validation metric then steps
	// after the epochs that validate only (Lightning's scheduler
	// frequency set to match).
	CheckValEveryNEpoch int
	// NumSanityValSteps runs this many validation batches before the first
	// training step of every Fit that has a validation loader (Lightning's
	// num_sanity_val_steps), so that a validation step that fails does so
	// in seconds rather than after an epoch of training. Their metrics are
	// discarded; no callback, logger or module hook other than the
	// validation step sees them, and they change nothing training reads
	// (weights, random streams, the data's order). 0: 2, Lightning's
	// default; -1: every validation batch (within LimitValBatches).
	// DisableSanityCheck turns it off (Lightning's num_sanity_val_steps=0),
	// as FastDevRun does.
	NumSanityValSteps  int
	DisableSanityCheck bool
	// OverfitBatches trains, validates and tests on the first this many
	// batches of each loader, in order (shuffling off: every epoch trains
	// on the same batches), as Lightning's overfit_batches: a model that
	// cannot drive the training loss of a batch or two towards zero has a
	// bug. It sets LimitTrainBatches, LimitValBatches and LimitTestBatches,
	// which must then be unset, and excludes FastDevRun. 0: off.
	OverfitBatches int
	// FastDevRun runs this many batches of training, validation and test
	// in a single epoch, with no checkpoints, as a smoke test. 0: off. As
	// Lightning's fast_dev_run it overrides MaxEpochs (1), MaxSteps (none),
	// LimitTrainBatches, LimitValBatches, LimitTestBatches and
	// LimitPredictBatches (FastDevRun each), ValCheckInterval (end of
	// epoch) and CheckValEveryNEpoch (1); Validate logs the ones it replaces.
	FastDevRun int
	// AccumulateGradBatches sums gradients over this many batches per
	// optimizer step. 0: 1. Above 1 it cannot be combined with an
	// AccumulationScheduler callback, which sets the number by epoch.
	AccumulateGradBatches int
	// GradientClipVal clips gradients when > 0, by GradientClipAlgorithm:
	// "norm" (the default: the global L2 norm) or "value" (each element).
	GradientClipVal       float64
	GradientClipAlgorithm string
	// LogGradNorm logs grad_norm, the global L2 norm of the gradients of
	// each optimizer step before clipping, with the step metrics (every
	// LogEveryNSteps steps, into metrics.csv) and in State.Metrics
	// (Lightning's track_grad_norm / log_grad_norm). It costs one pass over
	// the gradients per step and, under ddp, the overlap of the update
	// with the gradient reduction.
	LogGradNorm bool
	// Seed seeds parameter initialisation and dropout. The data order is
	// not drawn from it: a shuffling loader's order comes from its own
	// data.LoaderConfig.Seed (under ddp too, where the trainer's
	// DistributedSampler shuffles with it), so give the loaders the same
	// seed for one number to decide the run, as Lightning's seed_everything
	// (the cli does).
	Seed uint64
	// Deterministic asks for bitwise-reproducible runs for a given Seed,
	// whatever the cores of the machine: reductions run in fixed orders
	// (ops.HoldDeterministic, for each Fit: the convolution weight
	// gradient, split by default in two partial sums per core, always sums
	// the same number of parts, whatever other trainers of the process
	// ask), shuffles are drawn from (seed, epoch); strategies receive the
	// flag in strategy.Setup and refuse configurations that would break it.
	// An explicit FULGUR_BLAS_THREADS above 1 is logged as a warning.
	Deterministic bool
	// SyncBatchNorm makes every BatchNorm reduce its batch statistics
	// across all replicas of the job in training (Lightning's
	// sync_batchnorm=True, PyTorch's SyncBatchNorm): N replicas with batch
	// b normalise like one device with batch N·b. It costs two small
	// all-reduces per BatchNorm layer and step; with one replica it changes
	// nothing. Single layers can ask for it alone with nn.BatchNormSync.
	SyncBatchNorm bool
	// LogEveryNSteps records step metrics every this many steps. 0: 50.
	LogEveryNSteps int
	// DefaultRootDir is where logs and checkpoints go: each Fit writes into
	// a new DefaultRootDir/lightning_logs/version_N (see LogDir). "": ".".
	DefaultRootDir string
	// LogDir is the run directory of every Fit: the default checkpoints
	// and logger, and the callbacks given no path of their own, write
	// there (State.LogDir); loggers take their directory when built, so
	// give them this one (VersionDir names a new one). "": a new
	// DefaultRootDir/lightning_logs/version_N per Fit, N one above the
	// highest existing, so no earlier run is replaced; name a directory to
	// write into it (to continue a run there, say).
	LogDir string
	// DisableCheckpointing turns off the default checkpoints (Lightning's
	// enable_checkpointing=False). false: at the end of each epoch Fit
	// saves LogDir/checkpoints/last.ckpt and
	// LogDir/checkpoints/epoch=E-step=S.ckpt (keeping the newest), and
	// there too when a hook's Stop ends training in the middle of an epoch
	// (not inside an accumulation window), unless Callbacks holds a
	// callbacks.ModelCheckpoint, which then decides.
	// Stopping on a signal or a cancelled context still saves a checkpoint.
	DisableCheckpointing bool
	// DisableLogger turns off the default logger (Lightning's
	// logger=False). false: when Loggers is empty, a CSVLogger writes
	// LogDir/metrics.csv, and LogDir/hparams.yaml when Fit's module has
	// HParams (module.HParamser); a module without them gets no
	// hparams.yaml.
	DisableLogger bool
	// Precision is "32" (float32, the default) or "64" (float64).
	Precision string

	// Devices is the number of devices per node; -1 means all. 0: 1.
	Devices int
	// NumNodes is the number of machines. 0: 1.
	NumNodes int
	// Strategy is "auto" (the default), "single", "dp", "ddp", "ddp_spawn",
	// "sharded" (ZeRO stage 2; "sharded_stage1", "sharded_stage2"), "fsdp"
	// or "fsdp_hybrid_shard". StrategyImpl, a strategy value, is used instead when
	// set: it brings its own devices and ranks, so Strategy, Devices,
	// NumNodes and a "cuda" Accelerator are rejected beside it.
	Strategy     string
	StrategyImpl strategy.Strategy
	// ShardedCheckpoint makes every rank write its own part of the state
	// (the strategy's SaveState without gathering: fsdp's and sharded's
	// shards) to PATH.rank<R>-of-<N> beside an index at PATH holding the
	// trainer's state (Lightning's FSDP state_dict_type="sharded"; every
	// other save over PATH at the same world size writes
	// PATH.rank<R>-of-<N>.alt, so that a save a rank dies in leaves the
	// earlier checkpoint whole); resuming,
	// LoadWeights and VerifyCheckpoint read the index and every shard, at any
	// world size. Every process reads every shard when it resumes, so on
	// several machines PATH must be on a filesystem they all see (a shared
	// filesystem: each rank writes its shard there, rank 0 the index).
	// false: rank 0 writes one file of whole tensors.
	ShardedCheckpoint bool
	// Accelerator is "cpu" (the default), "cuda" or "auto".
	Accelerator string
	// UseDistributedSampler, when false, leaves the loaders' samplers alone
	// under distributed strategies. nil: true: each process reads its shard
	// of the data, and a loader's own Sampler (not the order Shuffle gives)
	// is sharded, the ranks together visiting what it gives, as Lightning's
	// DistributedSamplerWrapper (Predict reads the whole set in order).
	UseDistributedSampler *bool
	// SameOnEveryRank names settings of the program that every rank of a
	// job must have alike, with their values (a program's flags: the cli
	// gives it its own). A Fit of several ranks compares them across the
	// ranks, together with the settings of this Config that shape training,
	// the module's type and HParams, the loaders' batch sizes and data
	// sizes (with UseDistributedSampler on), and the program's and fulgur's builds, and fails on every rank
	// naming what differs: a rank that trained with its own batch size or
	// learning rate would otherwise drift from the others without an error.
	// Leave out what may differ between machines (paths, display), here
	// and in the module's HParams.
	SameOnEveryRank map[string]any

	// Callbacks are called in order at each hook they implement.
	Callbacks []Callback
	// Loggers receive metrics and hyperparameters (rank 0 only).
	Loggers []Logger
	// Profiler records spans. nil: profiler.Nop.
	Profiler profiler.Profiler
	// EnableProgressBar shows a progress bar on a terminal and periodic log
	// lines otherwise. nil: true. A callback that draws progress itself
	// (ProgressDisplay, callbacks.ProgressBar) replaces the built-in one;
	// false beside such a callback is rejected.
	EnableProgressBar *bool
	// HandleSignals makes SIGINT and SIGTERM during Fit finish the current
	// optimizer step, save a checkpoint to LogDir/checkpoints/
	// interrupted.ckpt, and return an *InterruptedError from Fit (with
	// Stats.Interrupted set), on every rank. A repeat of the signal within
	// 2 s (a shell or timeout signalling the whole process group, go run
	// forwarding it) is the same request; a later one exits at once. Under
	// SLURM (SLURM_JOB_ID set) SIGUSR1 does the same and then requeues the
	// job with scontrol. nil: true.
	HandleSignals *bool
	// WarnOnNaN makes a NaN or infinite loss a warning instead of an error.
	WarnOnNaN bool
	// DetectAnomaly checks every gradient after each backward pass and
	// stops at the first NaN or infinite value with an error naming the
	// step and the parameter (Lightning's detect_anomaly). It reads every
	// gradient once per step, so it is off by default.
	DetectAnomaly bool
	// Out is where the progress bar and reports go. nil: os.Stderr.
	Out io.Writer
	// Log is the structured logger. Zero value: zerolog on Out, at Info
	// level (pass a logger of your own to see the Debug lines).
	Log *zerolog.Logger
	// SettingName says how the trainer's and the strategies' errors and
	// log lines name a setting: given a Config field ("Devices") or a
	// WeightsOption as Go writes it (`trainer.StripPrefix("module.")`,
	// `trainer.Strict(false)`, `trainer.OnlyPrefix` where no argument is
	// meant), it returns the words its user knows it by, such as a command
	// line's flag ("-devices"; the cli sets its own), or "" for the Go
	// name. nil: every setting by its Go name (a field bare inside
	// Validate's sentences, Config.LogDir elsewhere). An error of the
	// module or a callback that the trainer wraps is never rewritten.
	SettingName func(setting string) string
	// Now is the clock (tests inject a fake one). nil: time.Now.
	Now func() time.Time
}

// Validate fills defaults and returns every problem found, each with its fix.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	n := c.name
	nonNeg := func(name string, v int) {
		if v < 0 {
			bad("%s is %d: use 0 (the default) or a positive number", n(name), v)
		}
	}
	// A nil pointer here would crash the checks below and the run: say so
	// and go on as if the field were unset, to report the rest too.
	if msg := nilEntry(c.StrategyImpl, "leave "+n("StrategyImpl")+" unset"); c.StrategyImpl != nil && msg != "" {
		bad("%s is %s", n("StrategyImpl"), msg)
		c.StrategyImpl = nil
	}
	if msg := nilEntry(c.Profiler, "leave "+n("Profiler")+" unset"); c.Profiler != nil && msg != "" {
		bad("%s is %s", n("Profiler"), msg)
		c.Profiler = nil
	}
	// CheckReady once per callback: conflicts leaves the refused ones out
	// (a struct literal's Name and settings are its zero values, which
	// would only add noise), and the loop at the end reports them.
	unready := make([]error, len(c.Callbacks))
	for i, cb := range c.Callbacks {
		if nilEntry(cb, "") == "" {
			unready[i] = checkReady(cb)
		}
	}
	errs = append(errs, c.conflicts(unready)...)
	if c.MaxEpochs < -1 {
		bad("%s is %d: use a positive number, 0 (the default: 1000 epochs, or no limit beside %s) or -1 (no limit)", n("MaxEpochs"), c.MaxEpochs, n("MaxSteps"))
	}
	nonNeg("MaxSteps", c.MaxSteps)
	nonNeg("MinEpochs", c.MinEpochs)
	nonNeg("MinSteps", c.MinSteps)
	if c.MaxEpochs > 0 && c.MinEpochs > c.MaxEpochs {
		lo, hi := n("MinEpochs"), n("MaxEpochs")
		bad("%s is %d and %s %d: %[3]s ends training first, so %[1]s would hold nothing; lower %[1]s or raise %[3]s", lo, c.MinEpochs, hi, c.MaxEpochs)
	}
	if c.MaxSteps > 0 && c.MinSteps > c.MaxSteps {
		lo, hi := n("MinSteps"), n("MaxSteps")
		bad("%s is %d and %s %d: %[3]s ends training first, so %[1]s would hold nothing; lower %[1]s or raise %[3]s", lo, c.MinSteps, hi, c.MaxSteps)
	}
	nonNeg("LimitTrainBatches", c.LimitTrainBatches)
	nonNeg("LimitValBatches", c.LimitValBatches)
	nonNeg("LimitTestBatches", c.LimitTestBatches)
	nonNeg("LimitPredictBatches", c.LimitPredictBatches)
	nonNeg("ValCheckInterval", c.ValCheckInterval)
	nonNeg("CheckValEveryNEpoch", c.CheckValEveryNEpoch)
	nonNeg("FastDevRun", c.FastDevRun)
	nonNeg("OverfitBatches", c.OverfitBatches)
	if k := c.OverfitBatches; k > 0 {
		ob := n("OverfitBatches")
		for _, l := range []struct {
			name string
			v    *int
		}{{"LimitTrainBatches", &c.LimitTrainBatches}, {"LimitValBatches", &c.LimitValBatches}, {"LimitTestBatches", &c.LimitTestBatches}} {
			if *l.v != 0 && *l.v != k {
				bad("%s is %d and %s is %d: %[1]s sets the training, validation and test limits to its number; leave %[3]s unset", ob, k, n(l.name), *l.v)
			}
			*l.v = k
		}
		if c.FastDevRun > 0 {
			bad("%s is %d and %s is %d: use one of them (%[3]s is a one-epoch smoke test, %[1]s trains every epoch on the same batches)", ob, k, n("FastDevRun"), c.FastDevRun)
		}
	}
	if c.NumSanityValSteps < -1 {
		bad("%s is %d: use 0 (the default, 2 batches), a positive number, -1 for every validation batch, or %s to skip the check", n("NumSanityValSteps"), c.NumSanityValSteps, n("DisableSanityCheck"))
	}
	nonNeg("AccumulateGradBatches", c.AccumulateGradBatches)
	nonNeg("LogEveryNSteps", c.LogEveryNSteps)
	nonNeg("NumNodes", c.NumNodes)
	if c.GradientClipVal < 0 || math.IsNaN(c.GradientClipVal) || math.IsInf(c.GradientClipVal, 0) {
		bad("%s is %g: use 0 (off) or a positive finite number", n("GradientClipVal"), c.GradientClipVal)
	}
	switch c.GradientClipAlgorithm {
	case "":
		c.GradientClipAlgorithm = "norm"
	case "norm", "value":
	default:
		bad("%s is %q: use \"norm\" or \"value\"", n("GradientClipAlgorithm"), c.GradientClipAlgorithm)
	}
	switch c.Precision {
	case "":
		c.Precision = "32"
	case "32", "64":
	case "16", "bf16", "16-mixed", "bf16-mixed":
		bad("%s is %q: half precision is not supported on CPU; use \"32\" or \"64\"", n("Precision"), c.Precision)
	default:
		bad("%s is %q: use \"32\" or \"64\"", n("Precision"), c.Precision)
	}
	if c.Devices < -1 {
		bad("%s is %d: use 1 or more, or -1 for all", n("Devices"), c.Devices)
	}
	if c.Devices == 0 {
		c.Devices = 1
	}
	if c.NumNodes == 0 {
		c.NumNodes = 1
	}
	if c.Strategy == "" {
		c.Strategy = "auto"
	}
	if c.StrategyImpl == nil && !strategy.Known(c.Strategy) {
		bad("%s is %q: %s", n("Strategy"), c.Strategy, strategy.UnknownAdvice(c.Strategy))
	} else if c.StrategyImpl == nil {
		if err := strategy.Check(c.Strategy, strategy.Options{Devices: c.Devices, NumNodes: c.NumNodes, Accelerator: c.Accelerator, SettingName: c.SettingName}); err != nil {
			errs = append(errs, err)
		}
	}
	switch c.Accelerator {
	case "":
		c.Accelerator = "cpu"
	case "cpu", "auto":
	case "cuda", "gpu":
		if !strategy.CUDAAvailable() {
			bad("%s is %q but this build has no CUDA support: build with -tags cuda on a machine with CUDA, or use \"cpu\"", n("Accelerator"), c.Accelerator)
		}
	default:
		bad("%s is %q: use \"cpu\", \"cuda\" or \"auto\"", n("Accelerator"), c.Accelerator)
	}
	overridden := c.fastDevRunOverrides()
	if c.FastDevRun > 0 {
		c.MaxEpochs = 1
		c.MaxSteps = 0
		c.LimitTrainBatches, c.LimitValBatches, c.LimitTestBatches, c.LimitPredictBatches = c.FastDevRun, c.FastDevRun, c.FastDevRun, c.FastDevRun
		c.ValCheckInterval = 0
		c.CheckValEveryNEpoch = 1
	}
	if c.NumSanityValSteps == 0 {
		c.NumSanityValSteps = 2
	}
	if c.MaxEpochs == 0 && c.MaxSteps == 0 {
		c.MaxEpochs = 1000
	}
	if c.CheckValEveryNEpoch == 0 {
		c.CheckValEveryNEpoch = 1
	}
	if c.AccumulateGradBatches == 0 {
		c.AccumulateGradBatches = 1
	}
	if c.LogEveryNSteps == 0 {
		c.LogEveryNSteps = 50
	}
	if c.DefaultRootDir == "" {
		c.DefaultRootDir = "."
	}
	if c.Profiler == nil {
		c.Profiler = profiler.Nop{}
	}
	if c.Out == nil {
		c.Out = os.Stderr
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		l := zerolog.New(zerolog.ConsoleWriter{Out: c.Out, NoColor: true, TimeFormat: "15:04:05"}).Level(zerolog.InfoLevel).With().Timestamp().Logger()
		c.Log = &l
	}
	if len(overridden) > 0 {
		c.Log.Warn().Strs("overridden", overridden).Int("fast_dev_run", c.FastDevRun).Msg(n("FastDevRun") + " replaces these settings for this smoke test: one epoch of " + n("FastDevRun") + " batches")
	}
	if cores := runtime.NumCPU(); c.Devices > cores && (c.Accelerator == "cpu" || c.Accelerator == "auto") && !placedByLauncher(c.Devices) {
		c.Log.Warn().Int("devices", c.Devices).Int("cores", cores).Msg(n("Devices") + " is above the number of CPU cores: the ranks share cores and each runs slower; use " + n("Devices") + " <= cores")
	}
	for i, cb := range c.Callbacks {
		if msg := nilEntry(cb, "remove the entry"); msg != "" {
			bad("Callbacks[%d] is %s", i, msg)
		} else if err := unready[i]; err != nil {
			bad("Callbacks[%d] (%T): %w", i, cb, err)
		}
		for _, msg := range wrongSignatures(cb, callbackInterfaces) {
			bad("Callbacks[%d]: %s", i, msg)
		}
	}
	for i, l := range c.Loggers {
		if msg := nilEntry(l, "remove the entry"); msg != "" {
			bad("Loggers[%d] is %s", i, msg)
		} else if err := checkReady(l); err != nil {
			bad("Loggers[%d] (%T): %w", i, l, err)
		}
		for _, msg := range wrongSignatures(l, loggerInterfaces) {
			bad("Loggers[%d]: %s", i, msg)
		}
	}
	return errors.Join(errs...)
}

// name is how errors and log lines name setting, a Config field or a
// WeightsOption (see SettingName): bare by default.
func (c *Config) name(setting string) string {
	if c.SettingName != nil {
		if n := c.SettingName(setting); n != "" {
			return n
		}
	}
	return setting
}

// field is name for a Config field that a message outside Validate's names:
// Config.LogDir by default, where the bare name would not say whose it is.
func (c *Config) field(f string) string {
	if n := c.name(f); n != f {
		return n
	}
	return "Config." + f
}

// eitherField names two fields that do the same here ("set Config.A or
// Config.B"), once where SettingName gives both one name (one flag).
func (c *Config) eitherField(a, b string) string {
	if na, nb := c.field(a), c.field(b); na != nb {
		return na + " or " + nb
	}
	return c.field(a)
}

// nilEntry says how v, a callback, logger, profiler or strategy, is nil
// ("" when it is not), and fix how to do without it: a constructor that
// failed returns a nil pointer, which in an interface is not nil and would
// crash the first hook or log call.
func nilEntry(v any, fix string) string {
	if v == nil {
		return "nil: remove it"
	}
	if typednil.Is(v) {
		return fmt.Sprintf("a nil %T: its constructor returned an error; check it, or %s", v, fix)
	}
	return ""
}

// checkReady is v's CheckReady error (nil when v is no ReadyChecker), a
// panic in it returned as an error naming the method.
func checkReady(v any) error {
	r, ok := v.(ReadyChecker)
	if !ok {
		return nil
	}
	err := guarded(r.CheckReady)
	var pe *panics.Error
	if errors.As(err, &pe) {
		return fmt.Errorf("CheckReady: %w", err)
	}
	return err
}

func (c *Config) progressBar() bool { return c.EnableProgressBar == nil || *c.EnableProgressBar }

func (c *Config) handleSignals() bool { return c.HandleSignals == nil || *c.HandleSignals }

func (c *Config) distributedSampler() bool {
	return c.UseDistributedSampler == nil || *c.UseDistributedSampler
}

// Bool returns a pointer to v, for the optional boolean fields.
func Bool(v bool) *bool { return &v }

// placedByLauncher reports whether this process is one rank of a job that a
// launcher started (mpirun, torchrun, srun) and bound to cores of its own,
// so that the node's devices ranks fit on the launcher's cores: a rank
// mpirun bound to one core sees only that core in runtime.NumCPU, although
// the node's ranks share none. Ranks that inherit their launcher's mask
// (torchrun, or any launcher run under taskset) share it, as a process's
// own ranks do (cluster.SharingRanks).
func placedByLauncher(devices int) bool {
	e, ok, err := cluster.Detect(cluster.OSLookup)
	if !ok || err != nil || e.WorldSize <= 1 {
		return false
	}
	cores := runtime.NumCPU()
	return cluster.SharingRanks(devices, cores, cluster.LauncherCPUs()) <= cores
}
