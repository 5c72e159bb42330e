package trainer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/internal/typednil"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy"
)

// Trainer runs modules. Make one with New; it may Fit a module and then
// Validate, Test or Predict with the trained parameters. A Trainer not made
// by New (the zero value) returns an error from every run method. A
// Trainer is not safe for concurrent use: call its methods one at a time
// (Trainers of their own, one per rank or per job, may run side by side).
type Trainer struct {
	made  bool // by New: see notMade
	cfg   Config
	strat strategy.Strategy
	mod   module.Module
	specs []module.Spec // mod's tensors, for WeightsSHA256 without a replica
	// opt and sched are the optimizer and scheduler the strategy made with
	// Setup.NewOptimizer: the loop reads the learning rate and steps the
	// scheduler; their state is saved and loaded by the strategy.
	opt   optim.Optimizer
	sched optim.Scheduler
	// schedOverride, when set, replaces the module's scheduler (LRFind's
	// sweep).
	schedOverride optim.Scheduler
	state         runState
	// hookView is the State a callback is handed: a copy of state's view
	// made for each call (one place, so that hooks allocate nothing).
	hookView State
	stats    Stats

	epochAgg map[string]*agg
	progress *progress
	worker   bool

	// Checkpoint and resume (checkpoint.go): where the loop stands, and
	// where a resumed run starts.
	pos        loopPos
	resumeAt   *loopPos
	resumeAggs map[string]*agg
	resumeBS   int
	// resumeWorld is the world size of the run that saved the checkpoint
	// a resumed run starts from.
	resumeWorld int
	trainBS     int // training batch size and batch count of the epoch
	trainNB     int
	accum       int
	signals     *signalWatch
	// fitCtx is Fit's context in a job of several ranks, where the loop
	// runs on it without its cancellation: a cancel is a request to stop
	// that the ranks agree on (stopCode), as a signal is. nil otherwise.
	fitCtx context.Context
	// agreeStop's flags and weights, kept to allocate nothing per step.
	stopFlags, stopWeights [1 + ctxCancelled]float64
	hooking                bool          // inside callbackHook: saves wait for its end
	hookOwner              string        // the callback being called
	saves                  []pendingSave // checkpoints asked for during the hook
	fitted                 bool          // Fit has trained t.mod: a second Fit continues
	// hooks are the per-batch hooks of the call's callbacks and module.
	hooks hookSet
	// excDone: this call ran the exception hooks (failed).
	excDone bool
	// heldStop is a Stop that MinEpochs or MinSteps hold off (holdStop);
	// warnedHeld: the Fit said so.
	heldStop   error
	warnedHeld bool

	// The run directory (rundir.go): the one chosen before ddp launched
	// its ranks, the loggers of this Fit (Config.Loggers or the default
	// CSVLogger) and the default epoch checkpoint to replace.
	launchDir     string
	loggers       []Logger
	lastEpochCkpt string
	// warnedOnStep holds the metrics warnEvalOnStep has warned about.
	warnedOnStep map[string]bool
	// fitLoggers is true once a Fit chose loggers, which Validate and Test
	// then log into.
	fitLoggers bool
	// logStep and logRows count rank 0's LogMetrics calls at one global
	// step (a checkpoint records them for RowResumer); logRows is -1 when
	// a resumed checkpoint did not record them.
	logStep, logRows int
	// madeRunDir is the run directory chooseLogDir created (rank 0), which
	// a Fit that fails before writing into it removes again.
	madeRunDir string
	// rank0Host is rank 0's host name when it runs on another host than
	// this rank ("" on rank 0 and on its host): rank 0's files are there.
	rank0Host string
}

// Stats summarises the last Fit. Epochs and GlobalStep are the run's, as
// Lightning's current_epoch and global_step are: a Fit resumed from a
// checkpoint (FromCheckpoint, an elastic restart) counts the epochs and
// steps before it too. TrainSamples, TrainTime and TrainSamplesPerS are
// this Fit's own: a resumed Fit counts only what it trained itself (none
// when nothing was left to train).
type Stats struct {
	// Epochs is how many epochs the run completed (a run stopped mid-epoch
	// does not count that epoch).
	Epochs int
	// GlobalStep is the optimizer steps the run has taken.
	GlobalStep int
	// TrainSamples is the samples this process trained on in this Fit.
	TrainSamples int
	// TrainTime is this Fit's wall time in training batches (validation
	// excluded).
	TrainTime time.Duration
	// TrainSamplesPerS is this Fit's training throughput, all ranks
	// together: TrainSamples times WorldSize over TrainTime (0 when no
	// batch ran).
	TrainSamplesPerS float64
	WorldSize        int
	StoppedEarly     string // the reason, when a callback stopped training
	// Interrupted is set when SIGINT or SIGTERM ended training (after a
	// checkpoint was saved to InterruptCheckpoint) or ctx was cancelled.
	Interrupted         bool
	InterruptCheckpoint string
	LastTrainLoss       float64
	ValidationsPassed   int
}

// New validates cfg and returns a Trainer.
func New(cfg Config) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("trainer config:\n%w", err)
	}
	return &Trainer{made: true, cfg: cfg, loggers: cfg.Loggers}, nil
}

// notMade answers a run method of a Trainer declared rather than made by
// New (var tr trainer.Trainer, or a nil *Trainer), whose Config was never
// validated: it has no defaults to run with and would crash in setup.
func (t *Trainer) notMade(call string) error {
	if t != nil && t.made {
		return nil
	}
	what := "the Trainer is a zero Trainer, declared rather than made by trainer.New"
	if t == nil {
		what = "the *Trainer is nil"
	}
	return fmt.Errorf("%s: %s: make it with trainer.New(trainer.Config{...}) (a zero Config is valid)", call, what)
}

// zeroLoader answers a data.Loader declared rather than made by
// data.NewLoader, which has no dataset and would crash the loop; nil for a
// nil loader, which the caller names itself.
func zeroLoader(call, what string, l *data.Loader) error {
	if l == nil || l.Dataset() != nil {
		return nil
	}
	return fmt.Errorf("%s: the %s is a zero data.Loader, declared rather than made by data.NewLoader, so it has no dataset: make it with data.NewLoader(ds, data.LoaderConfig{BatchSize: 64})", call, what)
}

// Config returns the validated configuration.
func (t *Trainer) Config() Config { return t.cfg }

// Stats returns figures of the last Fit.
func (t *Trainer) Stats() Stats { return t.stats }

// Metrics returns the latest value of every logged metric.
func (t *Trainer) Metrics() map[string]float64 {
	out := make(map[string]float64, len(t.state.Metrics))
	for k, v := range t.state.Metrics {
		out[k] = v
	}
	return out
}

// Store is the trained model's parameters and buffers (nil before setup,
// and for a strategy that does not hold the whole model in this process).
func (t *Trainer) Store() *module.Store {
	if t.strat == nil {
		return nil
	}
	return t.store()
}

// store is the strategy's strategy.Replica store, or nil.
func (t *Trainer) store() *module.Store {
	if r, ok := t.strat.(strategy.Replica); ok {
		return r.Store()
	}
	return nil
}

// IsGlobalZero reports whether this process is rank 0 (writes logs, prints
// results).
func (t *Trainer) IsGlobalZero() bool { return t.strat == nil || t.strat.Info().GlobalZero }

// LogDir is the run directory of the last Fit (a new
// DefaultRootDir/lightning_logs/version_N, or Config.LogDir), where its
// metrics.csv, hparams.yaml and default checkpoints are, the same on every
// rank, as Lightning's trainer.log_dir; without a Fit, Config.LogDir once
// a Validate, Test or Predict has run, else "".
func (t *Trainer) LogDir() string { return t.state.LogDir }

// IsWorker reports whether this process is a worker started by a launching
// strategy (DDP-spawn) that must not run the code after Fit.
func (t *Trainer) IsWorker() bool { return t.worker }

// FitOption changes one Fit call. A nil FitOption is no option.
type FitOption func(*fitOptions)

type fitOptions struct {
	ckptPath string
	weights  *weightsOptions // WithWeights
}

// FromCheckpoint resumes training from a checkpoint: a path, or "last" or
// "best" for one under DefaultRootDir (see ResolveCheckpoint). "" resumes
// nothing, as no option (a program may pass its flag through).
func FromCheckpoint(path string) FitOption { return func(o *fitOptions) { o.ckptPath = path } }

// EvalOption changes one Validate, Test or Predict call. A nil EvalOption
// is no option.
type EvalOption func(*evalOptions)

type evalOptions struct {
	ckptPath string
}

// WithCheckpoint evaluates the weights of a checkpoint, as Lightning's
// ckpt_path: "best" (ModelCheckpoint's best model), "last" (the newest
// last.ckpt under DefaultRootDir) or a path. Its parameters and buffers
// replace the ones the Trainer holds, on every rank. Without it, Validate,
// Test and Predict use the weights the Trainer holds: after Fit, the
// trained ones, as they do with which "".
func WithCheckpoint(which string) EvalOption { return func(o *evalOptions) { o.ckptPath = which } }

func (t *Trainer) dtype() tensor.Dtype {
	if t.cfg.Precision == "64" {
		return tensor.Float64
	}
	return tensor.Float32
}

// setup builds the strategy and replicas for m, once per module.
func (t *Trainer) setup(ctx context.Context, m module.Module, fields []data.Field) error {
	if m == nil {
		return errors.New("module is nil: pass your module.Module value")
	}
	if t.strat != nil {
		if t.mod == m {
			return nil
		}
		return t.rebind(m)
	}
	// Pick the matrix multiply (BLIS, else OpenBLAS, when the dynamic loader
	// finds them; pure-Go gonum otherwise) once per process, before any graph
	// runs.
	if err := ops.CheckKernels(); err != nil {
		return fmt.Errorf("float32 kernels: %w", err)
	}
	if _, err := blas.Choose(*t.cfg.Log, blas.ChooseOptions{}); err != nil {
		return fmt.Errorf("matrix multiply: %w", err)
	}
	// gonum reports GOMAXPROCS threads but splits a multiply by output
	// blocks, the same bits for any count; the plan's count is the BLAS's.
	if p := blas.CurrentPlan(); t.cfg.Deterministic && p.BLASThreads > 1 {
		t.cfg.Log.Warn().Int("blas_threads", p.BLASThreads).
			Msg(t.cfg.name("Deterministic") + ": the BLAS splits each multiply between threads; unset FULGUR_BLAS_THREADS for one thread")
	}
	b := module.NewBuilder(t.dtype())
	if err := configure(m, b); err != nil {
		return err
	}
	specs, err := b.Specs()
	if err != nil {
		return fmt.Errorf("module Configure:\n%w", err)
	}
	st := t.cfg.StrategyImpl
	if st == nil {
		// Ranks a strategy starts itself write rank_N.log into the run
		// directory, chosen here, before they exist; Fit then uses it.
		logDir := t.cfg.LogDir
		if logDir == "" {
			if logDir, err = VersionDir(t.cfg.DefaultRootDir, ""); err != nil {
				return err
			}
			t.launchDir = logDir
		}
		st, err = strategy.New(t.cfg.Strategy, strategy.Options{
			Devices: t.cfg.Devices, NumNodes: t.cfg.NumNodes, Accelerator: t.cfg.Accelerator, Log: *t.cfg.Log,
			LogDir: logDir, SettingName: t.cfg.SettingName,
		})
		if err != nil {
			return err
		}
	}
	if l, ok := st.(strategy.Launcher); ok {
		worker, err := l.Launch(ctx)
		if err != nil {
			return fmt.Errorf("strategy %s: starting its ranks: %w", st.Info().Name, err)
		}
		t.worker = worker
	}
	var opt optim.Optimizer
	var sched optim.Scheduler
	newOpt := func() (optim.Optimizer, optim.Scheduler, error) {
		if opt != nil {
			return nil, nil, fmt.Errorf("strategy %s asked for a second optimizer: a strategy makes one per process", st.Info().Name)
		}
		if oc, ok := m.(module.OptimizerConfigurer); ok {
			var o optim.Optimizer
			var s optim.Scheduler
			err := guarded(func() (err error) {
				o, s, err = oc.ConfigureOptimizers()
				return err
			})
			if err != nil {
				return nil, nil, fmt.Errorf("module.ConfigureOptimizers: %w", err)
			}
			if o == nil {
				return nil, nil, errors.New("module.ConfigureOptimizers returned a nil optimizer")
			}
			if t.schedOverride != nil {
				s = t.schedOverride
			}
			opt, sched = o, s
			return o, s, nil
		}
		o, err := optim.NewAdam(optim.AdamConfig{LR: 1e-3})
		opt, sched = o, t.schedOverride
		return o, sched, err
	}
	err = st.Setup(ctx, strategy.Setup{
		Module: m, Specs: specs, Dtype: t.dtype(), Seed: t.cfg.Seed, Deterministic: t.cfg.Deterministic, Fields: fields,
		NewOptimizer: newOpt, Log: *t.cfg.Log, Profiler: t.cfg.Profiler, SyncBatchNorm: t.cfg.SyncBatchNorm,
		SettingName: t.cfg.SettingName,
	})
	if err != nil {
		return fmt.Errorf("strategy %s: setup: %w", st.Info().Name, err)
	}
	if opt == nil {
		return fmt.Errorf("strategy %s: setup made no optimizer (it must call Setup.NewOptimizer once)", st.Info().Name)
	}
	info := st.Info()
	// A job of one rank may label its files freely (independent trainings
	// side by side, each with a rank of its own, as cmd/bench's).
	if p, ok := t.cfg.Profiler.(profiler.Ranked); ok && info.WorldSize > 1 && p.Rank() != info.Rank {
		return fmt.Errorf("Config.Profiler was built for rank %d, but this process is rank %d of %d: every rank would write the same profile files, one over the other; build it with the process's rank (Rank: env.Rank from cluster.Detect(cluster.OSLookup), as the cli does)", p.Rank(), info.Rank, info.WorldSize)
	}
	t.strat, t.mod, t.opt, t.sched, t.specs = st, m, opt, sched, specs
	t.state = runState{
		State: State{Rank: info.Rank, WorldSize: info.WorldSize, IsGlobalZero: info.GlobalZero,
			RootDir: t.cfg.DefaultRootDir, MaxEpochs: t.cfg.MaxEpochs, MaxSteps: t.cfg.MaxSteps, FastDevRun: t.cfg.FastDevRun > 0},
		Metrics: map[string]float64{}, Layers: b.Layers(), Store: t.store(),
	}
	if st := t.state.Store; st != nil && st.NumParams() > 0 && st.Grad32() == nil && st.Grad64() == nil {
		t.state.noGrad = fmt.Sprintf("State.Weights has no gradients: strategy %s keeps no whole gradient buffer (each rank reduces every gradient into its 1/%d shard as backward produces it); State.GradNorm is the reduced gradients' norm, and sharded_stage1 or ddp keep whole gradients to read here", info.Name, info.WorldSize)
	}
	if t.state.Store == nil {
		t.state.specs, t.state.dtype = specs, t.dtype()
		t.state.noStore = fmt.Sprintf("State.Weights is empty: strategy %s keeps no whole copy of the model in any process (each rank holds 1/%d of it); read the weights of a checkpoint (trainer.LoadWeights into a module.Store, or infer.New), or train with ddp or sharded to read them here", info.Name, info.WorldSize)
	}
	return nil
}

// rebind makes the trained parameters and buffers the weights of m, another
// value of the module: m's Configure must declare the same tensors (name,
// shape, kind and dtype). The strategy keeps its replicas and ranks.
func (t *Trainer) rebind(m module.Module) error {
	b := module.NewBuilder(t.dtype())
	if err := configure(m, b); err != nil {
		return err
	}
	specs, err := b.Specs()
	if err != nil {
		return fmt.Errorf("module Configure:\n%w", err)
	}
	// A strategy that holds no whole replica here (fsdp) checks m against
	// its own layout in Rebind.
	if st := t.store(); st != nil {
		if err := matchStore(specs, b.Dtype(), st); err != nil {
			return fmt.Errorf("the module value %T does not match the model this Trainer holds (its trained weights): %w", m, err)
		}
	}
	rb, ok := t.strat.(strategy.Rebinder)
	if !ok {
		return fmt.Errorf("strategy %s cannot run another module value over its weights: pass the module value given to Fit", t.strat.Info().Name)
	}
	if err := rb.Rebind(m); err != nil {
		return fmt.Errorf("strategy %s: %w", t.strat.Info().Name, err)
	}
	t.mod = m
	t.state.Layers = b.Layers()
	return nil
}

// matchStore reports every tensor that specs (a module value's
// declarations in dtype) and st (the weights held) disagree on.
func matchStore(specs []module.Spec, dtype tensor.Dtype, st *module.Store) error {
	var errs []error
	kind := func(buffer bool) string {
		if buffer {
			return "buffer"
		}
		return "parameter"
	}
	seen := map[string]bool{}
	for _, sp := range specs {
		seen[sp.Name] = true
		e, ok := st.Lookup(sp.Name)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s %q %v is declared by the module value but not held by the trained model", kind(sp.Buffer), sp.Name, sp.Shape))
		case !sameShape(e.Shape, sp.Shape) || dtype != st.Dtype():
			errs = append(errs, fmt.Errorf("%s %q is %v %v in the trained model but the module value declares %v %v", kind(sp.Buffer), sp.Name, e.Shape, st.Dtype(), sp.Shape, dtype))
		case e.Buffer != sp.Buffer:
			errs = append(errs, fmt.Errorf("%q is a %s in the trained model but the module value declares a %s", sp.Name, kind(e.Buffer), kind(sp.Buffer)))
		}
	}
	for _, e := range st.Entries() {
		if !seen[e.Name] {
			errs = append(errs, fmt.Errorf("%s %q %v of the trained model is not declared by the module value", kind(e.Buffer), e.Name, e.Shape))
		}
	}
	return errors.Join(errs...)
}

// configure runs m's Configure, a panic in it (a typed nil module's, named
// as such) returned as an error, as infer.New does.
func configure(m module.Module, b *module.Builder) error {
	if err := typednil.Call(m, "module", m.Configure, b); err != nil {
		return fmt.Errorf("module Configure: %w", err)
	}
	return nil
}

// loaderFor inserts the strategy's distributed sampler when it has one. A
// sampler of the loader's own (not the Sequential or Random one its Shuffle
// stands for) is sharded by it (data.DistributedSampler.Inner), as
// Lightning's DistributedSamplerWrapper does, unless own is false
// (Predict, which returns predictions in dataset order, reads the whole
// set in order).
func (t *Trainer) loaderFor(l *data.Loader, train, own bool) *data.Loader {
	if l == nil {
		return l
	}
	c := l.Config()
	shuffle := c.Shuffle
	if t.cfg.OverfitBatches > 0 && (c.Shuffle || c.Sampler != nil) {
		// The same batches every epoch.
		shuffle = false
		if train {
			t.cfg.Log.Info().Int("overfit_batches", t.cfg.OverfitBatches).Msg(t.cfg.name("OverfitBatches") + ": the training loader is read in order, so every epoch trains on the same batches")
		}
		l = l.WithSampler(data.SequentialSampler{})
	}
	if !t.cfg.distributedSampler() {
		return l
	}
	ds, ok := t.strat.(strategy.Sampler)
	if !ok || t.strat.Info().WorldSize == 1 {
		return l
	}
	s := ds.DistributedSampler(shuffle, c.Seed, train)
	if d, ok := s.(data.DistributedSampler); ok && own && ownSampler(l.Config()) {
		d.Inner, d.Shuffle = l.Config().Sampler, false
		s = d
	}
	return l.WithSampler(s)
}

// ownSampler: the loader's sampler is one its config set, not the
// SequentialSampler or RandomSampler{Seed} that Shuffle stands for.
func ownSampler(c data.LoaderConfig) bool {
	switch s := c.Sampler.(type) {
	case nil, data.SequentialSampler:
		return false
	case data.RandomSampler:
		return !c.Shuffle || s.Seed != c.Seed
	}
	return true
}

// Fit trains m on train, validating on val (which may be nil).
//
// The weights live in the Trainer (Store), not in m, which only declares
// and uses them: unlike a LightningModule handed to a second
// Trainer.fit, m given to another Trainer starts from its initial weights
// (Config.Seed). To go on from a run, pass FromCheckpoint with its
// checkpoint ("last").
func (t *Trainer) Fit(ctx context.Context, m module.Module, train, val *data.Loader, opts ...FitOption) (err error) {
	if err := t.notMade("Fit"); err != nil {
		return err
	}
	t.excDone = false
	defer func() { err = t.failed(ctx, err) }()
	if t.cfg.Deterministic {
		// For this Fit: a trainer without Deterministic, after this one
		// or beside it, neither switches it off nor finds it left on.
		defer ops.HoldDeterministic()()
	}
	var fo fitOptions
	for _, o := range opts {
		if o != nil { // one appended conditionally: no option
			o(&fo)
		}
	}
	if ctx == nil {
		return errNilContext("Fit")
	}
	if fo.weights != nil && fo.weights.path == "" {
		return errors.New("Fit: trainer.WithWeights was given an empty path: pass the safetensors state dict or checkpoint to start from (or \"last\" or \"best\"), or leave WithWeights out to start from the initial weights")
	}
	if fo.weights != nil && fo.ckptPath != "" {
		return fmt.Errorf("Fit: trainer.FromCheckpoint(%q) and trainer.WithWeights(%q) were both given: FromCheckpoint resumes a run (weights, optimizer, epoch), WithWeights starts a new one from weights only; pass one", fo.ckptPath, fo.weights.path)
	}
	if train == nil {
		return errors.New("Fit: the training loader is nil: pass a *data.Loader")
	}
	if err := errors.Join(zeroLoader("Fit", "training loader", train), zeroLoader("Fit", "validation loader", val)); err != nil {
		return err
	}
	if err := checkModule("Fit", m); err != nil {
		return err
	}
	if val != nil {
		if _, ok := m.(module.Validator); !ok {
			return errors.New("Fit: a validation loader was given but the module has no ValidationStep: implement module.Validator or pass nil")
		}
	}
	again := t.fitted && t.strat != nil && t.mod == m
	prevStop := t.stats.StoppedEarly
	if err := t.setup(ctx, m, train.Dataset().Fields()); err != nil {
		return err
	}
	if fr, ok := t.strat.(strategy.FitRunner); ok {
		r, remote, err := fr.RunFit(ctx, func(ctx context.Context) (strategy.FitResult, error) {
			if err := t.fit(ctx, m, train, val, fo, again, prevStop); err != nil {
				var ie *InterruptedError
				if errors.As(err, &ie) {
					// A DDP-spawn worker hands the interruption to the
					// launching process.
					r, _ := t.fitResult()
					fi := ie.fitInterrupted()
					fi.Result, fi.Err = r, err
					return r, fi
				}
				return strategy.FitResult{}, err
			}
			return t.fitResult()
		})
		var fi *strategy.FitInterrupted
		if errors.As(err, &fi) {
			if fi.Err != nil {
				return fi.Err // trained here: Fit's own *InterruptedError
			}
			ie := &InterruptedError{GlobalStep: fi.GlobalStep, Checkpoint: fi.Checkpoint}
			if fi.Signal != 0 {
				ie.Signal = fi.Signal
			} else if ie.Err = fi.Cancelled; ie.Err == nil {
				ie.Err = context.Canceled
			}
			if fi.Checkpoint == "" {
				// Stopped before the processes trained: nothing to adopt.
				return ie
			}
			// Trained in other processes, which saved fi.Checkpoint; the
			// strategy loaded their weights.
			t.adoptFit(fi.Result)
			if lerr := t.loadCallbackStates(fi.Result.Callbacks); lerr != nil {
				return errors.Join(ie, lerr)
			}
			return ie
		}
		if err != nil || !remote {
			return err
		}
		t.adoptFit(r)
		return t.loadCallbackStates(r.Callbacks)
	}
	return t.fit(ctx, m, train, val, fo, again, prevStop)
}

// fitResult is what the last Fit did, for a strategy that hands it to
// another process (strategy.FitRunner).
func (t *Trainer) fitResult() (strategy.FitResult, error) {
	s := t.stats
	cbs, err := t.callbackStates()
	return strategy.FitResult{Metrics: t.Metrics(), Epochs: s.Epochs, GlobalStep: s.GlobalStep,
		TrainSamples: s.TrainSamples, TrainSeconds: s.TrainTime.Seconds(), TrainSamplesPerS: s.TrainSamplesPerS,
		LastTrainLoss: s.LastTrainLoss, WorldSize: s.WorldSize, StoppedEarly: s.StoppedEarly, Callbacks: cbs, LogDir: t.state.LogDir}, err
}

// adoptFit takes the figures of a Fit that ran in other processes (the
// strategy loaded the trained weights).
func (t *Trainer) adoptFit(r strategy.FitResult) {
	t.stats = Stats{Epochs: r.Epochs, GlobalStep: r.GlobalStep, TrainSamples: r.TrainSamples,
		TrainTime: time.Duration(r.TrainSeconds * float64(time.Second)), TrainSamplesPerS: r.TrainSamplesPerS,
		WorldSize: r.WorldSize, StoppedEarly: r.StoppedEarly, LastTrainLoss: r.LastTrainLoss}
	for k, v := range r.Metrics {
		t.state.Metrics[k] = v
	}
	t.state.GlobalStep, t.state.Epoch = r.GlobalStep, max(r.Epochs-1, 0)
	if r.LogDir != "" {
		// Validate and Test log where the Fit did, as after a Fit here.
		t.state.LogDir = r.LogDir
		t.loggers, t.fitLoggers = t.cfg.Loggers, true
		if l, err := NewCSVLogger(r.LogDir); err == nil && t.defaultLogger() {
			t.loggers = []Logger{l}
		}
	}
}

// hparamsOf calls the module's HParams, its panic an error with the
// user's line, as in the module's other methods.
func hparamsOf(h module.HParamser) (hp map[string]any, err error) {
	err = guarded(func() error {
		hp = h.HParams()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("module.HParams: %w", err)
	}
	return hp, nil
}

// callbackLog is State.LogMetrics, logging at step(). The names are
// checked on every rank, so that all fail alike (a callback may set a
// row's "epoch", as in Lightning; not its "step"); the values join the
// metrics the progress display and other callbacks read.
func (t *Trainer) callbackLog(step func() int) func(map[string]float64) error {
	return func(m map[string]float64) error {
		for k := range m {
			if msg := module.ReservedMetricName(k); msg != "" && k != "epoch" {
				return fmt.Errorf("State.LogMetrics: metric %q: %s", k, msg)
			}
		}
		for k, v := range m {
			if k != "epoch" {
				t.state.setMetric(k, v, t.state.inValEnd)
			}
		}
		return t.logMetrics(step(), m)
	}
}

// fit trains the set-up module in this process.
func (t *Trainer) fit(ctx context.Context, m module.Module, train, val *data.Loader, fo fitOptions, again bool, prevStop string) (err error) {
	if t.strat.Info().WorldSize > 1 {
		// Every collective, data read, validation and checkpoint of the
		// Fit runs to its end on every rank; the cancel is read where the
		// ranks agree on stopping (after a step, a mid-epoch validation,
		// an epoch's end, at an epoch's start) and stops them all there,
		// saving as a signal does. A cancel that ended this rank's
		// collective, validation or checkpoint alone failed it with the
		// context's error, nothing saved, and the others on their lost
		// peer.
		t.fitCtx, ctx = ctx, context.WithoutCancel(ctx)
		defer func() { t.fitCtx = nil }()
	}
	t.stats = Stats{WorldSize: t.strat.Info().WorldSize}
	t.heldStop, t.warnedHeld = nil, false
	if err := t.agreeSettings(ctx, m, train, val); err != nil {
		return err
	}
	if err := t.elasticRun(ctx, &fo.ckptPath); err != nil {
		return fmt.Errorf("Fit: %w", err)
	}
	logDir, err := t.chooseLogDir(ctx)
	if err != nil {
		return fmt.Errorf("Fit: %w", err)
	}
	if t.madeRunDir == logDir {
		defer func() {
			if err != nil {
				removeIfEmpty(logDir)
			}
		}()
	}
	t.madeRunDir = ""
	if err := t.prepareRunDir(ctx, logDir, fo.ckptPath); err != nil {
		return fmt.Errorf("Fit: %w", err)
	}
	t.state.LogDir, t.lastEpochCkpt = logDir, ""
	t.loggers, t.fitLoggers = t.cfg.Loggers, true
	t.logStep, t.logRows = -1, 0
	if t.defaultLogger() {
		l, err := NewCSVLogger(logDir)
		if err != nil {
			return fmt.Errorf("Fit: default logger: %w", err)
		}
		t.loggers = []Logger{l}
	}
	t.state.Stage = "fit"
	t.hooks = t.hooksOf(m)
	t.state.HasValidation = val != nil
	t.state.save, t.state.saving = t.saveCheckpoint, t.savePending
	t.state.log = t.callbackLog(func() int { return t.state.GlobalStep })
	t.state.Optimizer, t.state.LogEveryNSteps = t.opt.Name(), t.cfg.LogEveryNSteps
	t.state.warn = func(msg string) { t.cfg.Log.Warn().Msg(msg) }
	t.state.rank0 = t.rank0Value
	if t.cfg.handleSignals() {
		// From Fit's setup to the ranks' agreement after its end hooks
		// (where a successful Fit stops it; a failed or interrupted one
		// after its exception hooks and the loggers' Finalize): a signal
		// outside the loop took its default action, and the process died
		// in a hook, its work (a callback's cleanup, charts) undone. The
		// loop acts on one at its next agreement on stopping, the end
		// hooks after they ran (agreeEnd).
		t.signals = watchSignals(t.cfg.Log)
		defer t.signals.stop()
	}
	status := "failed"
	defer func() {
		// The exception hooks before the loggers close, as Lightning's.
		err = t.failed(ctx, err)
		if ferr := t.finalizeLoggers(status); err == nil {
			err = ferr
		}
	}()
	if err := t.onSetup(ctx, m, "fit"); err != nil {
		return err
	}
	start := 0
	if fo.ckptPath == "" {
		fo.ckptPath = t.slurmResume()
	}
	resumedFrom := ""
	if fo.ckptPath != "" {
		path, err := t.checkpointPath(fo.ckptPath)
		if err != nil {
			return fmt.Errorf("Fit: resume: %w", err)
		}
		if start, err = t.resume(ctx, path); err != nil {
			return err
		}
		resumedFrom = path
		if fo.weights != nil && t.state.IsGlobalZero {
			// An elastic restart or SLURM requeue of a run that started
			// from the weights: it goes on from its own checkpoint.
			t.cfg.Log.Info().Str("weights", fo.weights.path).Str("checkpoint", path).Msg("resumed the run's own checkpoint: the weights WithWeights names were its starting point and are not loaded again")
		}
		if err := t.resumeLoggers(); err != nil {
			return fmt.Errorf("Fit: resume: %w", err)
		}
	} else if fo.weights != nil {
		if again {
			return errors.New("Fit: trainer.WithWeights on a Trainer that has already trained this module: its weights and position would be replaced; make a new Trainer to start from the file")
		}
		if err := t.loadWeights(ctx, fo.weights); err != nil {
			return fmt.Errorf("Fit: %w", err)
		}
	} else if again {
		if start, err = t.continueFit(prevStop); err != nil {
			return err
		}
	}
	if err := t.takeUpPosition(train); err != nil {
		return err
	}
	t.fitted, t.state.ResumedFrom = true, resumedFrom
	train, val = t.loaderFor(train, true, true), t.loaderFor(val, false, true)
	if h, ok := m.(module.HParamser); ok {
		hp, err := hparamsOf(h)
		if err != nil {
			return err
		}
		if err := t.logHyperparams(hp); err != nil {
			return err
		}
	}
	if t.progress, err = newProgress(&t.cfg, t.state.IsGlobalZero); err != nil {
		return err
	}
	if err = t.fillLayerShapes(m, train); err != nil {
		return err
	}
	stepAtStart := t.state.GlobalStep
	t.startSchedule(start)
	// The profiler's "fit" span holds the whole of the training, its
	// OnFitStart to its Teardown hooks, which the profiler's shares are of;
	// it closes before the profiler's files are flushed.
	endFit := sync.OnceFunc(t.span("fit"))
	defer endFit()
	if err = t.agreeHookStop(ctx, t.onFitStart(ctx, m)); err == nil {
		err = t.fitLoop(ctx, m, train, val, start)
	} else if _, ok := isStop(err); !ok {
		return err
	}
	t.finishStats()
	if err == nil && resumedFrom != "" && t.state.GlobalStep == stepAtStart && t.state.IsGlobalZero {
		t.cfg.Log.Warn().Str("checkpoint", resumedFrom).Int("global_step", t.state.GlobalStep).Int("max_epochs", t.cfg.MaxEpochs).Int("max_steps", t.cfg.MaxSteps).
			Msg(fmt.Sprintf("Fit resumed from a checkpoint that had nothing left to train under %[1]s and %[2]s, and trained no step (a run that %[2]s stopped mid-epoch counts that epoch as done): raise %[1]s or %[2]s, whichever was reached, to train further", t.cfg.name("MaxEpochs"), t.cfg.name("MaxSteps")))
	}
	t.progress.done()
	if st, ok := isStop(err); ok {
		t.stats.StoppedEarly = st.Reason
		t.cfg.Log.Info().Str("reason", st.Reason).Msg("training stopped early")
		err = nil
	}
	if err != nil && ctx.Err() != nil && !t.stats.Interrupted && t.strat.Info().WorldSize == 1 && !t.pos.midWindow {
		// The context was cancelled inside a step, while fetching data, or
		// before the first step (a resumed run's position is taken up as
		// its checkpoint is restored): the weights and position are those
		// after the last finished step, which is what the checkpoint saves.
		err = t.saveInterrupt(ctx, &InterruptedError{Err: ctx.Err(), GlobalStep: t.state.GlobalStep})
	}
	if err != nil {
		if ctx.Err() != nil || t.stats.Interrupted {
			status = "interrupted"
			t.stats.Interrupted = true
		}
		return err
	}
	if t.signals != nil {
		t.signals.endHooks.Store(true)
	}
	hctx := t.endHookCtx(ctx)
	herr := t.stopOr(t.onFitEnd(hctx, m))
	if herr == nil {
		herr = t.onTeardown(hctx, m, "fit")
	}
	// A signal during the hooks (the watch outlasts them) stops the
	// program as one during training does, once they ran: the interrupt
	// checkpoint (at the run's end: nothing is left to train) and the
	// *InterruptedError. A cancel there is the hooks' to answer.
	stops := signalStops
	if t.pos.midWindow {
		stops = noStops
	}
	if err := t.agreeEnd(ctx, herr, "Fit's end hooks (OnFitEnd, Teardown)", stops); err != nil {
		return err
	}
	if t.signals != nil {
		// No later agreement would act on a signal: it takes its default
		// action again, as before Fit, rather than being dropped.
		t.signals.stop()
		t.signals = nil
	}
	endFit()
	if err := t.flushProfiler(ctx); err != nil {
		return err
	}
	if t.state.IsGlobalZero {
		if err := t.cfg.Profiler.Report(t.cfg.Out); err != nil {
			return fmt.Errorf("profiler report: %w", err)
		}
	}
	status = "success"
	if t.stats.Interrupted {
		status = "interrupted"
	}
	return nil
}

// continueFit is a second Fit of the same module on this Trainer: it goes on
// from where the first stopped (after an error), or explains why there is
// nothing left to train.
func (t *Trainer) continueFit(prevStop string) (int, error) {
	c, p := t.cfg, t.pos
	reached := ""
	switch {
	case prevStop != "":
		reached = "it stopped early (" + prevStop + ")"
	case c.MaxEpochs > 0 && p.Epoch >= c.MaxEpochs:
		reached = fmt.Sprintf("%s is %d", c.name("MaxEpochs"), c.MaxEpochs)
	case c.MaxSteps > 0 && t.state.GlobalStep >= c.MaxSteps:
		reached = fmt.Sprintf("%s is %d", c.name("MaxSteps"), c.MaxSteps)
	}
	if reached != "" {
		return 0, fmt.Errorf("Fit: this Trainer already trained this module (epoch %d, global step %d) and %s: nothing is left to train; to train further, make a Trainer with a higher %s or %s and pass trainer.FromCheckpoint with this run's checkpoint", p.Epoch, t.state.GlobalStep, reached, c.name("MaxEpochs"), c.name("MaxSteps"))
	}
	if p.midWindow {
		return 0, fmt.Errorf("Fit: the earlier Fit stopped inside a gradient accumulation window (epoch %d, batch %d): it cannot be continued; resume from a checkpoint with trainer.FromCheckpoint", p.Epoch, p.Batch)
	}
	if p.Batch > 0 || p.Validated || p.ValPending {
		t.resumeAt, t.resumeAggs = &p, t.epochAgg
	}
	t.cfg.Log.Info().Int("epoch", p.Epoch).Int("batch", p.Batch).Int("global_step", t.state.GlobalStep).Msg("continuing the earlier Fit")
	return p.Epoch, nil
}

// callbackStates is each stateful callback's state by name, handed from a
// ddp_spawn worker to the launching process.
func (t *Trainer) callbackStates() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, cb := range t.cfg.Callbacks {
		if sf, ok := cb.(Stateful); ok {
			b, err := stateDictOf(sf)
			if err != nil {
				return nil, fmt.Errorf("callbacks/%s.StateDict: %w", cb.Name(), err)
			}
			out[cb.Name()] = b
		}
	}
	return out, nil
}

// stateDictOf is sf's StateDict, a panic in it (the user's code, as a
// hook is) an error with the stack.
func stateDictOf(sf Stateful) (b []byte, err error) {
	err = guarded(func() (err error) {
		b, err = sf.StateDict()
		return err
	})
	return b, err
}

// loadCallbackStates gives the launching process's callbacks the states
// the ddp_spawn workers ended with, so that their values (the checkpoint's
// best model path, early stopping's reason) read as after a Fit in process.
func (t *Trainer) loadCallbackStates(states map[string][]byte) error {
	for _, cb := range t.cfg.Callbacks {
		sf, ok := cb.(Stateful)
		if !ok {
			continue
		}
		b, ok := states[cb.Name()]
		if !ok {
			continue
		}
		if err := guarded(func() error { return sf.LoadStateDict(b) }); err != nil {
			return fmt.Errorf("callbacks/%s.LoadStateDict (the ddp_spawn workers' state): %w", cb.Name(), err)
		}
	}
	return nil
}

// fillLayerShapes builds m's training graph for one batch of train's size,
// without running it, to learn each layer's input and output shapes, when a
// callback shows them (LayerShapesUser).
func (t *Trainer) fillLayerShapes(m module.Module, train *data.Loader) error {
	want := false
	for _, cb := range t.cfg.Callbacks {
		if u, ok := cb.(LayerShapesUser); ok {
			yes, err := ability("callbacks/"+cb.Name(), "WantsLayerShapes", u.WantsLayerShapes)
			if err != nil {
				return err
			}
			want = want || yes
		}
	}
	if !want || !t.state.IsGlobalZero {
		return nil
	}
	st := t.store()
	if st == nil {
		// No whole replica here (fsdp): a store with the model's layout
		// whose parameters share one scratch region is enough to build
		// the graph, which only the shapes are read from.
		var err error
		if st, err = module.NewLayoutStore(t.specs, t.dtype(), t.cfg.Seed, nil); err != nil {
			return nil // the summary goes without shapes
		}
	}
	fields := train.Dataset().Fields()
	ins := make([]module.StepInput, len(fields))
	for i, f := range fields {
		ins[i] = module.StepInput{Name: f.Name, Shape: f.Shape}
	}
	s := module.NewStep(G.NewGraph(), module.Train, st, train.Config().BatchSize, ins, t.cfg.Seed)
	s.RecordLayerIO()
	func() {
		// A step that cannot build fails the first training batch with its
		// full error; the summary just goes without shapes.
		defer func() { _ = recover() }()
		_, _ = m.TrainingStep(s)
	}()
	s.LayerShapes(t.state.Layers)
	return nil
}

func (t *Trainer) stopOr(err error) error {
	if _, ok := isStop(err); ok {
		return nil
	}
	return err
}

type agg struct {
	spec   module.LogSpec
	sum    float64
	weight float64
	max    float64
	min    float64
	n      int
	// A count metric's counts summed over batches, and what derives its
	// values from them (nil after a resume until its next batch).
	counts []float64
	derive module.CountMetric
}

// addMetric adds one batch's logged value (or counts) to a.
func (a *agg) addMetric(mt *module.Metric) {
	if mt.Derive == nil {
		a.add(mt.Value, mt.Weight)
		return
	}
	a.derive = mt.Derive
	if len(a.counts) < len(mt.Counts) {
		a.counts = append(a.counts, make([]float64, len(mt.Counts)-len(a.counts))...)
	}
	if mt.Weight == 0 {
		// A batch of padding only (a rank with no example of its own):
		// it names the metric for the ranks' reduction and counts nothing.
		return
	}
	for i, c := range mt.Counts {
		a.counts[i] += c
	}
	a.n++
	a.weight += mt.Weight
}

func (a *agg) add(v, w float64) {
	if a.n == 0 {
		a.max, a.min = v, v
	}
	a.n++
	switch {
	case w == 0: // a padded row's value adds nothing, even when infinite
	case a.spec.Reduce == module.Sum:
		a.sum += v // the batches' values, as Lightning's reduce_fx="sum"
	default:
		a.sum += v * w
	}
	a.weight += w
	a.max = math.Max(a.max, v)
	a.min = math.Min(a.min, v)
}

func (a *agg) value() float64 {
	switch a.spec.Reduce {
	case module.Sum:
		return a.sum
	case module.Max:
		return a.max
	case module.Min:
		return a.min
	}
	if a.weight == 0 {
		return math.NaN()
	}
	return a.sum / a.weight
}

func stepName(name string, spec module.LogSpec) string {
	if spec.OnStep && spec.OnEpoch {
		return name + "_step"
	}
	return name
}

func epochName(name string, spec module.LogSpec) string {
	if spec.OnStep && spec.OnEpoch {
		return name + "_epoch"
	}
	return name
}

// checkGrads returns an error naming the first parameter whose gradient
// holds a NaN or an infinity (Config.DetectAnomaly).
func (t *Trainer) checkGrads(epoch, bi int) error {
	st := t.store()
	if st == nil {
		return fmt.Errorf("%s: strategy %s does not hold the model's gradients in this process (it is not a strategy.Replica): turn %[1]s off", t.cfg.name("DetectAnomaly"), t.strat.Info().Name)
	}
	g32, g64 := st.Grad32(), st.Grad64()
	if g32 == nil && g64 == nil {
		return fmt.Errorf("%s: strategy %s keeps no gradient buffer in this process (it reduces each gradient as backward produces it): turn %[1]s off", t.cfg.name("DetectAnomaly"), t.strat.Info().Name)
	}
	for _, e := range st.Entries() {
		if e.Buffer {
			continue
		}
		for i := e.Offset; i < e.Offset+e.Len; i++ {
			var v float64
			if g32 != nil {
				v = float64(g32[i])
			} else {
				v = g64[i]
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				if t.state.GlobalStep == 0 {
					// No update has been made: the learning rate cannot be the cause.
					return fmt.Errorf("%s: the gradient of parameter %q is %v at element %d, epoch %d, batch %d (global step 0), before the first optimizer step (from the initial weights): look in TrainingStep for an op whose gradient is infinite where it is used, such as a square root of zero or a log or division of zero", t.cfg.name("DetectAnomaly"), e.Name, v, i-e.Offset, epoch, bi)
				}
				return fmt.Errorf("%s: the gradient of parameter %q is %v at element %d, epoch %d, batch %d (global step %d): lower the learning rate, clip gradients (%s), or look for a log or division of zero in the step", t.cfg.name("DetectAnomaly"), e.Name, v, i-e.Offset, epoch, bi, t.state.GlobalStep, t.cfg.name("GradientClipVal"))
			}
		}
	}
	return nil
}

func (t *Trainer) finishStats() {
	if t.stats.TrainTime > 0 {
		t.stats.TrainSamplesPerS = float64(t.stats.TrainSamples*t.strat.Info().WorldSize) / t.stats.TrainTime.Seconds()
	}
	t.stats.GlobalStep = t.state.GlobalStep
}

// schedMetric is the value a scheduler's Step takes: for an
// optim.Monitored one (ReduceOnPlateau) the metric it names, by default
// val_loss when logged, else train_loss (a bare name answers with the value
// logged last, so a per-step call sees this step's train loss); NaN for the
// others. A monitored metric that was never logged is an error: NaN never
// improves, so the scheduler would cut the rate every Patience+1 intervals
// whatever the training does. Every rank takes rank 0's value (a training
// loss differs between ranks), so that their learning rates stay equal.
func (t *Trainer) schedMetric(ctx context.Context, sched optim.Scheduler) (float64, error) {
	mon, ok := sched.(optim.Monitored)
	if !ok {
		return math.NaN(), nil
	}
	v, err := t.monitored(mon.Monitor())
	if err != nil {
		return 0, err
	}
	return t.rank0Value(context.WithoutCancel(ctx), v)
}

// monitored is the value of the metric a scheduler monitors (see
// schedMetric).
func (t *Trainer) monitored(name string) (float64, error) {
	m := Metrics{m: t.state.Metrics, stepNewer: t.state.stepNewer}
	if name == "" {
		for _, k := range []string{"val_loss", "train_loss"} {
			if v, ok := m.Get(k); ok {
				return v, nil
			}
		}
		return 0, fmt.Errorf("the learning-rate scheduler watches val_loss or train_loss, and neither is logged (logged metrics are %v): log one with Step.Log, or set PlateauConfig.Monitor to a logged metric", m.Names())
	}
	if v, ok := m.Get(name); ok {
		return v, nil
	}
	return 0, fmt.Errorf("the learning-rate scheduler monitors %q, which is not logged (logged metrics are %v): log it with Step.Log, or set PlateauConfig.Monitor to a logged metric", name, m.Names())
}

// finishTrainEpoch reduces epoch aggregates across ranks and logs them.
func (t *Trainer) finishTrainEpoch(ctx context.Context, epoch int) error {
	vals, err := t.reduceAggs(ctx, t.epochAgg, false)
	if err != nil {
		return err
	}
	out := map[string]float64{}
	for name, v := range vals {
		n := name
		t.state.setMetric(n, v, false)
		out[n] = v
		if bare, ok := strings.CutSuffix(n, "_epoch"); ok {
			t.state.setStepNewer(bare, false)
		}
	}
	if len(out) > 0 {
		out["epoch"] = float64(epoch)
		return t.logMetrics(t.state.GlobalStep, out)
	}
	return nil
}

// reduceAggs turns aggregates into values keyed by their logged names
// (epochName), reducing across ranks those marked SyncDist (or all of them
// when all is true) and every count metric, in name order so every rank
// issues the same collective.
func (t *Trainer) reduceAggs(ctx context.Context, aggs map[string]*agg, all bool) (map[string]float64, error) {
	names := sortedKeys(aggs)
	var sums, weights []float64
	var ops []module.Reduce
	var synced []string
	for _, n := range names {
		a := aggs[n]
		if a.derive != nil || a.counts != nil {
			continue // count metrics go after the scalars, below
		}
		if all || a.spec.SyncDist {
			synced = append(synced, n)
			switch a.spec.Reduce {
			case module.Max:
				sums = append(sums, a.max)
			case module.Min:
				sums = append(sums, a.min)
			default:
				sums = append(sums, a.sum)
			}
			weights = append(weights, a.weight)
			ops = append(ops, a.spec.Reduce)
		}
	}
	// Count metrics are always summed across ranks, element by element, and
	// their values derived once from the job's counts.
	var counted []string
	nScalar := len(sums)
	for _, n := range names {
		if a := aggs[n]; a.derive != nil || a.counts != nil {
			counted = append(counted, n)
			sums = append(sums, a.counts...)
			for range a.counts {
				weights = append(weights, 0)
				ops = append(ops, module.Sum)
			}
		}
	}
	out := make(map[string]float64, len(names))
	for _, n := range names {
		if a := aggs[n]; a.derive == nil && a.counts == nil {
			out[epochName(n, a.spec)] = a.value()
		}
	}
	if len(sums) > 0 && t.strat.Info().WorldSize > 1 {
		if err := t.strat.Reduce(ctx, sums, weights, ops); err != nil {
			return nil, fmt.Errorf("reduce metrics %v across ranks: %w", synced, err)
		}
		for i, n := range synced {
			switch ops[i] {
			case module.Mean:
				if weights[i] > 0 {
					out[epochName(n, aggs[n].spec)] = sums[i] / weights[i]
				}
			default:
				out[epochName(n, aggs[n].spec)] = sums[i]
			}
		}
	}
	off := nScalar
	for _, n := range counted {
		a := aggs[n]
		c := sums[off : off+len(a.counts)]
		off += len(a.counts)
		if a.derive == nil {
			continue // resumed with no batch since: nothing to derive with
		}
		vals := map[string]float64{}
		a.derive.Values(n, c, vals)
		for k, v := range vals {
			out[epochName(k, a.spec)] = v
		}
	}
	return out, nil
}

// evalLoop runs the batches of l (at most limit) in mode (Validate or
// Test) with their hooks: the loop's start and epoch-start hooks, then
// each batch's start hook, step and end hook. It returns the batches'
// metrics and the first Stop a hook asked for (the loop runs on to its
// end); the end hooks are the caller's, after the metrics are reduced.
func (t *Trainer) evalLoop(ctx context.Context, m module.Module, mode module.Mode, l *data.Loader, limit int) (_ map[string]*agg, stop, _ error) {
	aggs := map[string]*agg{}
	nb, err := numBatchesOf(mode.String(), l, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := t.noBatch(mode.String(), l, nb); err != nil {
		return nil, nil, err
	}
	if limit > 0 && limit < nb {
		nb = limit
	}
	stop, err = splitStop(t.onEvalStart(ctx, m, mode))
	if err != nil {
		return nil, nil, err
	}
	// The per-batch hooks see the loop's batch in State.BatchIdx; the
	// hooks after it, the training batch again.
	defer func(bi int) { t.state.BatchIdx = bi }(t.state.BatchIdx)
	it := l.Iter(ctx, 0)
	defer it.Close()
	bi := 0
	for ; bi < nb; bi++ {
		b, ok := it.Next()
		if !ok {
			break
		}
		if stop, err = splitStop(firstStop(stop, t.onEvalBatchStart(ctx, m, mode, b, bi))); err != nil {
			return nil, nil, fmt.Errorf("%s batch %d: %w", mode, bi, err)
		}
		if err := ctx.Err(); err != nil {
			// Before the step: a strategy may take a step the cancel
			// ended for a broken job.
			return nil, nil, fmt.Errorf("%s batch %d: %w", mode, bi, err)
		}
		sp := t.cfg.Profiler.Start(mode.String() + " step")
		res, err := t.strat.Step(ctx, mode, b, strategy.TrainOptions{})
		metrics := res.Metrics
		sp.End()
		if err != nil {
			return nil, nil, fmt.Errorf("%s batch %d: %w", mode, bi, err)
		}
		if stop, err = splitStop(firstStop(stop, t.onEvalBatchEnd(ctx, m, mode, b, bi, PredictBatch{}))); err != nil {
			return nil, nil, fmt.Errorf("%s batch %d: %w", mode, bi, err)
		}
		for _, mt := range metrics {
			a := aggs[mt.Name]
			if a == nil {
				a = &agg{spec: mt.Spec}
				aggs[mt.Name] = a
				t.warnEvalOnStep(mode, mt.Name, mt.Spec)
			}
			a.addMetric(&mt)
		}
	}
	if err := it.Err(); err != nil {
		return nil, nil, loopDataErr(ctx, mode.String(), err, bi, nb)
	}
	return aggs, stop, ctx.Err()
}

// loopDataErr is the error of an evaluation loop's Iter after done of nb
// batches: the loop's cancellation, which the Iter reports as its own,
// is said to be one (still matching context.Canceled), not a data problem.
func loopDataErr(ctx context.Context, mode string, err error, done, nb int) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%s was cancelled after %d of %d batches: %w", mode, done, nb, err)
	}
	return fmt.Errorf("%s data: %w", mode, err)
}

// warnEvalOnStep says, once per name, that a value an evaluation step logs
// with OnStep gets no per-batch record: an evaluation loop records one
// value, the mean of its batches (under name_epoch with OnEpoch, under
// name with OnEpoch(false)), where Lightning also logs each batch's.
func (t *Trainer) warnEvalOnStep(mode module.Mode, name string, spec module.LogSpec) {
	if !spec.OnStep || !t.state.IsGlobalZero || t.warnedOnStep[name] {
		return
	}
	if t.warnedOnStep == nil {
		t.warnedOnStep = map[string]bool{}
	}
	t.warnedOnStep[name] = true
	t.cfg.Log.Warn().Str("metric", name).Str("recorded_as", epochName(name, spec)).Str("step", mode.String()).
		Msgf("%q is logged with OnStep in an evaluation step: evaluation records one value per loop, the mean of its batches (as %q), never one per batch; drop OnStep there (or log per-step values from TrainingStep)", name, epochName(name, spec))
}

// noBatch is the error of an evaluation loader that gives this rank no
// batch of a dataset that has examples because DropLast drops the rank's
// whole share: the loop would run nothing and its metrics (or predictions)
// would be missing without a word. (A rank of an evaluation set smaller
// than the job gets a padded row instead, see data.DistributedSampler.)
func (t *Trainer) noBatch(what string, l *data.Loader, nb int) error {
	c := l.Config()
	if nb > 0 || !c.DropLast || l.Dataset().Len() == 0 {
		return nil
	}
	info := t.strat.Info()
	return fmt.Errorf("the %s loader gives rank %d of %d no batch: DropLast is set and the rank's share of the dataset's %d examples is smaller than BatchSize %d: unset DropLast (evaluation rarely wants it) or lower BatchSize", what, info.Rank, info.WorldSize, l.Dataset().Len(), c.BatchSize)
}

// validationLoop runs validation; its epoch metrics are always reduced
// across ranks so every rank makes the same early-stop and checkpoint
// decisions.
func (t *Trainer) validationLoop(ctx context.Context, m module.Module, val *data.Loader, epoch int) error {
	aggs, stop, err := t.evalLoop(ctx, m, module.Validate, val, t.cfg.LimitValBatches)
	if err != nil {
		return err
	}
	vals, err := t.reduceAggs(ctx, aggs, true)
	if err != nil {
		return err
	}
	out := map[string]float64{}
	for name, v := range vals {
		n := name
		t.state.setMetric(n, v, true)
		out[n] = v
	}
	t.stats.ValidationsPassed++
	t.progress.validation(epoch, out)
	if len(out) > 0 {
		out["epoch"] = float64(epoch)
		if err := t.logMetrics(t.state.GlobalStep, out); err != nil {
			return err
		}
	}
	return firstStop(stop, t.onValidationEnd(ctx, m, epoch))
}

// Validate runs the validation loop once and returns its metrics, which it
// logs as Test does.
func (t *Trainer) Validate(ctx context.Context, m module.Module, val *data.Loader, opts ...EvalOption) (map[string]float64, error) {
	if err := t.notMade("Validate"); err != nil {
		return nil, err
	}
	t.excDone = false
	out, err := t.evaluate(ctx, m, val, module.Validate, opts)
	return out, t.failed(ctx, err)
}

// Test runs the test loop once and returns its metrics. After Fit it uses
// the trained parameters, on the module value given to Fit or on any other
// value whose Configure declares the same tensors (a model built again);
// WithCheckpoint picks a checkpoint's instead. On rank 0 the metrics go to
// the loggers at the evaluated weights' global step, as Lightning's
// trainer.test logs them: those of the Fit before, else Config.Loggers,
// else a CSVLogger in Config.LogDir (none with DisableLogger, or with
// neither set and no Fit).
func (t *Trainer) Test(ctx context.Context, m module.Module, test *data.Loader, opts ...EvalOption) (map[string]float64, error) {
	if err := t.notMade("Test"); err != nil {
		return nil, err
	}
	t.excDone = false
	out, err := t.evaluate(ctx, m, test, module.Test, opts)
	return out, t.failed(ctx, err)
}

// prepareEval sets up (or rebinds) the strategy for m and loads the
// checkpoint the options ask for. It returns the global step and the
// epochs completed of the weights evaluated: the checkpoint's, or the
// trainer's (Stats: its Fit's, 0 without one).
func (t *Trainer) prepareEval(ctx context.Context, m module.Module, l *data.Loader, stage string, opts []EvalOption) (step, epochs int, err error) {
	var eo evalOptions
	for _, o := range opts {
		if o != nil { // one appended conditionally: no option
			o(&eo)
		}
	}
	if err := t.setup(ctx, m, l.Dataset().Fields()); err != nil {
		return 0, 0, err
	}
	if !t.fitLoggers {
		// Without a Fit before, the evaluation's run directory is the one
		// Config.LogDir names, if any (State.LogDir of its hooks).
		t.state.LogDir = t.cfg.LogDir
	}
	if err := t.onSetup(ctx, m, stage); err != nil {
		return 0, 0, err
	}
	if eo.ckptPath == "" {
		return t.state.GlobalStep, t.stats.Epochs, nil
	}
	path, err := t.checkpointPath(eo.ckptPath)
	if err != nil {
		return 0, 0, err
	}
	sd, c, err := readStateDict(path, t.dtype(), t.cfg.name("Precision"))
	if err != nil {
		return 0, 0, err
	}
	// The weights only: evaluation leaves the optimizer as it is.
	weights := &strategy.StateDict{}
	for _, tn := range sd.Tensors {
		if !strings.HasPrefix(tn.Name, strategy.OptimizerPrefix) {
			weights.Tensors = append(weights.Tensors, tn)
		}
	}
	if err := t.strat.LoadState(ctx, weights); err != nil {
		return 0, 0, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := t.loadModuleCheckpoint(ctx, c); err != nil {
		return 0, 0, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	t.cfg.Log.Info().Str("path", path).Msg("evaluating the weights of a checkpoint")
	// The position the checkpoint recorded, as ReadCheckpointInfo gives
	// it, from the header already read.
	return c.trainer.GlobalStep, c.trainer.epochsDone(), nil
}

func (t *Trainer) evaluate(ctx context.Context, m module.Module, l *data.Loader, mode module.Mode, opts []EvalOption) (map[string]float64, error) {
	if ctx == nil {
		if mode == module.Validate {
			return nil, errNilContext("Validate")
		}
		return nil, errNilContext("Test")
	}
	if l == nil {
		return nil, fmt.Errorf("%s: the loader is nil: pass a *data.Loader", mode)
	}
	if err := zeroLoader(strings.ToUpper(mode.String()[:1])+mode.String()[1:], "loader", l); err != nil {
		return nil, err
	}
	if err := checkModule(strings.ToUpper(mode.String()[:1])+mode.String()[1:], m); err != nil {
		return nil, err
	}
	switch mode {
	case module.Validate:
		if _, ok := m.(module.Validator); !ok {
			return nil, errors.New("Validate: the module has no ValidationStep: implement module.Validator")
		}
	case module.Test:
		if _, ok := m.(module.Tester); !ok {
			return nil, errors.New("Test: the module has no TestStep: implement module.Tester")
		}
	}
	step, epochs, err := t.prepareEval(ctx, m, l, mode.String(), opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mode, err)
	}
	if err := t.evalLoggers(); err != nil {
		return nil, fmt.Errorf("%s: %w", mode, err)
	}
	// A callback's figures go where the evaluation's do, at the evaluated
	// weights' step, with or without a Fit before.
	fitLog := t.state.log
	t.state.log = t.callbackLog(func() int { return step })
	defer func() { t.state.log = fitLog }()
	t.state.Stage = mode.String()
	t.hooks = t.hooksOf(m)
	limit := t.cfg.LimitValBatches
	if mode == module.Test {
		limit = t.cfg.LimitTestBatches
	}
	end := t.span(mode.String())
	// A Stop a hook asks for has no training to stop here: the loop runs
	// to its end and returns its metrics.
	aggs, _, err := t.evalLoop(ctx, m, mode, t.loaderFor(l, false, true), limit)
	end()
	if err := t.agreeEval(ctx, err, "the "+mode.String()+" loop"); err != nil {
		return nil, err
	}
	vals, err := t.reduceAggs(ctx, aggs, true)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, v := range vals {
		n := name
		out[n] = v
		t.state.setMetric(n, v, mode == module.Validate)
	}
	switch mode {
	case module.Test:
		if err := t.stopOr(t.onTestEnd(ctx, m)); err != nil {
			return nil, err
		}
	case module.Validate:
		// As Lightning's trainer.validate, the validation-end hooks run
		// (State.Stage "validate"; the callbacks that act on a Fit's
		// validations, ModelCheckpoint and EarlyStopping, skip it).
		if err := t.stopOr(t.onValidationEnd(ctx, m, t.state.Epoch)); err != nil {
			return nil, err
		}
	}
	if err := t.onTeardown(ctx, m, mode.String()); err != nil {
		return nil, err
	}
	if err := t.logEvaluation(step, epochs, mode.String(), out); err != nil {
		return nil, fmt.Errorf("%s: %w", mode, err)
	}
	return out, nil
}

// logEvaluation gives what Validate or Test measured to the loggers, as
// Lightning's trainer.validate and trainer.test log, at the global step of
// the weights evaluated, then finalizes them: after a Fit, its loggers
// (the default CSVLogger in its run directory included); otherwise
// Config.Loggers, or a CSVLogger in Config.LogDir (unless DisableLogger);
// with none of these, nothing. As Lightning adds current_epoch to every
// logged dict, the row's "epoch" is the epochs the weights completed (after
// a Fit as its current_epoch is: 2 after two epochs; for a checkpoint's
// weights, the epochs they were trained for, where a Lightning trainer
// that did not fit writes 0). The rows count as Fit's do at that step
// (RowResumer), so a checkpoint saved later records them. An
// EvaluationLogger gets the row as an evaluation's, stage "validate" or
// "test".
func (t *Trainer) logEvaluation(step, epochs int, stage string, out map[string]float64) error {
	if !t.state.IsGlobalZero || len(t.loggers) == 0 {
		return nil
	}
	if len(out) > 0 {
		row := maps.Clone(out)
		row["epoch"] = float64(epochs)
		if err := t.logRow(step, row, stage); err != nil {
			return err
		}
	}
	return t.finalizeLoggers("success")
}

// evalLoggers picks the loggers of Validate and Test on rank 0 (see
// logEvaluation) before their hooks run, so that a callback's
// State.LogMetrics reaches them too.
func (t *Trainer) evalLoggers() error {
	if t.fitLoggers || !t.state.IsGlobalZero {
		return nil
	}
	t.loggers = t.cfg.Loggers
	if len(t.loggers) == 0 && t.cfg.LogDir != "" && !t.cfg.DisableLogger {
		l, err := NewCSVLogger(t.cfg.LogDir)
		if err != nil {
			return err
		}
		t.loggers = []Logger{l}
	}
	return nil
}

// Predict runs the predict graph over l and returns one output tensor per
// batch (copies, safe to keep). After Fit it uses the trained parameters
// (see Test); WithCheckpoint picks a checkpoint's instead.
//
// The predictions are in dataset order on every strategy: a shuffling
// loader (Shuffle, a RandomSampler) is read in order, with a warning. With
// several ranks (ddp, sharded), each rank predicts its shard of l
// (DistributedSampler) and every rank returns all predictions in dataset
// order, cut into batches of l's batch size, as one process returns them.
// The gathering goes through the strategy's Reduce in float64, with a
// weight per value: while it runs, every rank holds about 40 bytes per
// predicted value (and per row) of the whole set, besides the result.
// PredictEach hands each batch out instead, holding nothing.
func (t *Trainer) Predict(ctx context.Context, m module.Module, l *data.Loader, opts ...EvalOption) (_ []*tensor.Dense, err error) {
	if err := t.notMade("Predict"); err != nil {
		return nil, err
	}
	t.excDone = false
	defer func() { err = t.failed(ctx, err) }()
	var out []*tensor.Dense
	var rows [][]int
	var pads [][]bool
	pl, err := t.predictBatches(ctx, m, l, opts, func(b PredictBatch) error {
		out = append(out, b.Output.Clone().(*tensor.Dense))
		rows = append(rows, append([]int(nil), b.Indices...))
		pads = append(pads, append([]bool(nil), b.Pad...))
		return nil
	})
	if err != nil || pl == l {
		return out, err
	}
	return t.gatherPredictions(ctx, out, rows, pads, l.Dataset().Len(), l.Config().BatchSize)
}

// PredictBatch is one batch of predictions as PredictEach hands it out.
type PredictBatch struct {
	// Output is PredictStep's output, one row per example. It is valid
	// during the call only: copy what must be kept.
	Output *tensor.Dense
	// Indices are each row's index in the loader's dataset.
	Indices []int
	// Pad marks rows that repeat an example another rank predicts (a
	// rank's shard padded to the others' length): skip them. nil or all
	// false when none is.
	Pad []bool
}

// PredictEach runs the predict graph over l as Predict does and calls fn
// with each batch's predictions, in this rank's order, instead of
// returning them (Lightning's BasePredictionWriter): with several ranks,
// each calls fn for the batches of its own shard only, nothing is
// gathered, and memory stays that of one batch whatever the size of the
// set. Write each rank's predictions where they belong (a file per rank,
// rows placed by Indices). An error from fn, or a panic in it (as an
// error with the stack), stops the run and is returned, naming fn and the
// rank; the other ranks' PredictEach fails naming that rank once their
// own batches are done (as after any rank's failure or cancel there, under
// a strategy that holds the whole model in each process: ddp, sharded).
func (t *Trainer) PredictEach(ctx context.Context, m module.Module, l *data.Loader, fn func(PredictBatch) error, opts ...EvalOption) error {
	if err := t.notMade("PredictEach"); err != nil {
		return err
	}
	t.excDone = false
	if fn == nil {
		return t.failed(ctx, errors.New("PredictEach: fn is nil: pass the function that takes each batch's predictions"))
	}
	// fn is the user's code, as a hook is: its panic becomes an error with
	// the stack down to the user's line, and its failures are named.
	_, err := t.predictBatches(ctx, m, l, opts, func(b PredictBatch) error {
		if err := guarded(func() error { return fn(b) }); err != nil {
			return fmt.Errorf("PredictEach's fn: %w", err)
		}
		return nil
	})
	return t.failed(ctx, err)
}

// predictBatches runs the predict loop over l, calling each for every
// batch, and returns the loader it read (l, or l with the strategy's or a
// sequential sampler).
func (t *Trainer) predictBatches(ctx context.Context, m module.Module, l *data.Loader, opts []EvalOption, each func(PredictBatch) error) (*data.Loader, error) {
	if ctx == nil {
		return nil, errNilContext("Predict")
	}
	if l == nil {
		return nil, errors.New("Predict: the loader is nil: pass a *data.Loader")
	}
	if err := zeroLoader("Predict", "loader", l); err != nil {
		return nil, err
	}
	if err := checkModule("Predict", m); err != nil {
		return nil, err
	}
	if _, ok := m.(module.Predictor); !ok {
		return nil, errors.New("Predict: the module has no PredictStep: implement module.Predictor")
	}
	if _, _, err := t.prepareEval(ctx, m, l, "predict", opts); err != nil {
		return nil, fmt.Errorf("predict: %w", err)
	}
	t.state.Stage = "predict"
	t.hooks = t.hooksOf(m)
	defer t.span("predict")()
	pl := t.loaderFor(l, false, false)
	if _, random := l.Config().Sampler.(data.RandomSampler); pl == l && random {
		// As under ddp, whose evaluation sampler never shuffles: the
		// predictions come back in dataset order on every strategy (they
		// carry no index that would let the caller undo a shuffle).
		t.cfg.Log.Warn().Msg("Predict: the loader shuffles (LoaderConfig.Shuffle, or a RandomSampler); predictions are made in dataset order instead")
		pl = l.WithSampler(data.SequentialSampler{})
	}
	nb, err := numBatchesOf("predict", pl, 0)
	if err != nil {
		return nil, err
	}
	if err := t.noBatch("predict", pl, nb); err != nil {
		return nil, err
	}
	if t.cfg.LimitPredictBatches > 0 && t.cfg.LimitPredictBatches < nb {
		nb = t.cfg.LimitPredictBatches
	}
	// A Stop a hook asks for has no training to stop: the loop runs on.
	if err := t.stopOr(t.onEvalStart(ctx, m, module.Predict)); err != nil {
		return nil, err
	}
	defer func(bi int) { t.state.BatchIdx = bi }(t.state.BatchIdx)
	if err := t.agreeEval(ctx, t.predictLoop(ctx, m, pl, nb, each), "the predict loop"); err != nil {
		return nil, err
	}
	if err := t.stopOr(t.onPredictEnd(ctx, m)); err != nil {
		return nil, err
	}
	if err := t.onTeardown(ctx, m, "predict"); err != nil {
		return nil, err
	}
	return pl, nil
}

// predictLoop runs the first nb batches of pl through the predict step
// with their hooks, calling each for every batch's predictions.
func (t *Trainer) predictLoop(ctx context.Context, m module.Module, pl *data.Loader, nb int, each func(PredictBatch) error) error {
	it := pl.Iter(ctx, 0)
	defer it.Close()
	bi := 0
	for ; bi < nb; bi++ {
		b, ok := it.Next()
		if !ok {
			break
		}
		if err := t.stopOr(t.onEvalBatchStart(ctx, m, module.Predict, b, bi)); err != nil {
			return fmt.Errorf("predict batch %d: %w", bi, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("predict batch %d: %w", bi, err)
		}
		res, err := t.strat.Step(ctx, module.Predict, b, strategy.TrainOptions{})
		if err != nil {
			return fmt.Errorf("predict batch %d: %w", bi, err)
		}
		pb := PredictBatch{Output: res.Output, Indices: b.Indices, Pad: b.Pad}
		if err := each(pb); err != nil {
			return fmt.Errorf("predict batch %d: %w", bi, err)
		}
		if err := t.stopOr(t.onEvalBatchEnd(ctx, m, module.Predict, b, bi, pb)); err != nil {
			return fmt.Errorf("predict batch %d: %w", bi, err)
		}
	}
	if err := it.Err(); err != nil {
		return loopDataErr(ctx, "predict", err, bi, nb)
	}
	return nil
}

// agreeEval has the ranks agree on how an evaluation loop went (agreeEnd)
// under a strategy whose evaluation steps exchange nothing, one holding
// the whole model in each process (strategy.Replica): a rank whose loop
// failed or was cancelled joins the others there instead of leaving them
// waiting in the next collective. Under one whose steps gather the
// weights (fsdp), the others fail in their next step's collective.
func (t *Trainer) agreeEval(ctx context.Context, err error, what string) error {
	if t.store() == nil {
		return err
	}
	return t.agreeEnd(ctx, err, what, noStops)
}

// maxPredictDims bounds the rank of one prediction row that ranks agree on
// before gathering.
const maxPredictDims = 8

// gatherPredictions puts every rank's predictions (out, with the dataset
// index of each row) into dataset order on every rank. Each rank writes its
// rows into their slots of an n-row buffer of zeros and the ranks sum the
// buffers (x+0 is x exactly), with a count per slot; rows no rank predicted
// (LimitPredictBatches) are left out, and so are padded rows (pads), which
// repeat a row another rank predicts.
func (t *Trainer) gatherPredictions(ctx context.Context, out []*tensor.Dense, rows [][]int, pads [][]bool, n, batchSize int) ([]*tensor.Dense, error) {
	// Agree on the shape of a row: ranks with no rows learn it from others.
	hdr := make([]float64, 2+maxPredictDims)
	for i := range hdr {
		hdr[i] = -1
	}
	if len(out) > 0 {
		if out[0].Dims() == 0 || out[0].Shape()[0] != len(rows[0]) {
			return nil, fmt.Errorf("predict: PredictStep returned shape %v for %d rows: return one row per example to predict on several ranks", out[0].Shape(), len(rows[0]))
		}
		sh := out[0].Shape()[1:]
		if len(sh) > maxPredictDims {
			return nil, fmt.Errorf("predict: PredictStep returned rows of shape %v: at most %d dimensions per row can be gathered across ranks", sh, maxPredictDims)
		}
		hdr[0], hdr[1] = float64(sh.TotalSize()), float64(len(sh))
		for i, d := range sh {
			hdr[2+i] = float64(d)
		}
	}
	ops := make([]module.Reduce, len(hdr))
	for i := range ops {
		ops[i] = module.Max
	}
	if err := t.strat.Reduce(ctx, hdr, make([]float64, len(hdr)), ops); err != nil {
		return nil, fmt.Errorf("predict: agree on the output shape across ranks: %w", err)
	}
	if hdr[0] < 0 {
		return nil, nil // no rank predicted anything
	}
	width := int(hdr[0])
	rowShape := make([]int, int(hdr[1]))
	for i := range rowShape {
		rowShape[i] = int(hdr[2+i])
	}
	// Slots: n rows of width values, then n counts.
	buf := make([]float64, n*width+n)
	for bi, y := range out {
		vals := denseFloats(y)
		if len(vals) != len(rows[bi])*width {
			return nil, fmt.Errorf("predict: this rank's batch %d has %d values for %d rows of %v: every rank's PredictStep must return rows of one shape", bi, len(vals), len(rows[bi]), rowShape)
		}
		for r, idx := range rows[bi] {
			if r < len(pads[bi]) && pads[bi][r] {
				continue
			}
			if idx < 0 || idx >= n {
				return nil, fmt.Errorf("predict: row index %d is outside the dataset of %d", idx, n)
			}
			copy(buf[idx*width:(idx+1)*width], vals[r*width:(r+1)*width])
			buf[n*width+idx]++
		}
	}
	ops = make([]module.Reduce, len(buf))
	for i := range ops {
		ops[i] = module.Sum
	}
	if err := t.strat.Reduce(ctx, buf, make([]float64, len(buf)), ops); err != nil {
		return nil, fmt.Errorf("predict: gather the predictions across ranks: %w", err)
	}
	var keep []int
	for i := 0; i < n; i++ {
		if buf[n*width+i] > 0 {
			keep = append(keep, i)
		}
	}
	var res []*tensor.Dense
	for lo := 0; lo < len(keep); lo += batchSize {
		part := keep[lo:min(lo+batchSize, len(keep))]
		shape := append([]int{len(part)}, rowShape...)
		if t.dtype() == tensor.Float64 {
			v := make([]float64, 0, len(part)*width)
			for _, i := range part {
				v = append(v, buf[i*width:(i+1)*width]...)
			}
			res = append(res, tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v)))
		} else {
			v := make([]float32, 0, len(part)*width)
			for _, i := range part {
				for _, x := range buf[i*width : (i+1)*width] {
					v = append(v, float32(x))
				}
			}
			res = append(res, tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v)))
		}
	}
	return res, nil
}

// denseFloats returns a prediction's values as float64.
func denseFloats(y *tensor.Dense) []float64 {
	switch v := y.Data().(type) {
	case []float64:
		return v
	case []float32:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	case float32:
		return []float64{float64(v)}
	case float64:
		return []float64{v}
	}
	return nil
}

// Teardown releases the strategy's replicas and connections, and the share
// of the process's cores that several replicas in it planned for (dp,
// in-process ranks; see blas.ShareCores): a program that trains again
// after a dp Fit calls it, or the later run gets that share only. It calls
// no hook: the callbacks' and the module's Teardown (TeardownHook,
// module.TearDowner) end each Fit, Validate, Test and Predict.
func (t *Trainer) Teardown(ctx context.Context) error {
	if t.strat == nil {
		return nil
	}
	err := t.strat.Teardown(ctx)
	t.strat, t.mod = nil, nil
	return err
}

// errNilContext answers a nil context.Context, which would otherwise crash
// the first collective or cancellation check deep inside the call.
func errNilContext(call string) error {
	return fmt.Errorf("%s: the context is nil: pass context.Background() (or a context you cancel to stop)", call)
}
