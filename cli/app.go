package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/launch"
	"github.com/fulgur-ml/fulgur/trainer"
)

// App is a training program: a module and its data, whose fields tagged
// `flag:"name"` become flags, beside the Trainer's settings (Settings).
// Main is the whole main function of such a program:
//
//	cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}.Main()
//
// The first argument picks the subcommand, fit (the default), validate,
// test, predict or lr-find (or the first argument after the flags, for
// launcher scripts that put theirs first); -h lists them and every flag;
// -config FILE reads flags from a YAML or JSON file, which the command
// line overrides.
type App struct {
	// Name is the program's name in help, errors and the summary.
	Name string
	// Description is a line for -h.
	Description string
	// Model is the module, a pointer to a struct: its tagged fields are the
	// model: flags, their values here (or their default tags) the defaults.
	// Run parses the flags into it, then calls its Validate() error
	// method when it has one (Data's too), so bad combinations are
	// refused before anything is built.
	Model module.Module
	// Data gives the loaders; its tagged fields are the data: flags.
	Data DataModule
	// Trainer holds the defaults of the trainer: flags; a zero field takes
	// the default its tag names.
	Trainer Settings
	// Links give a flag the value of another unless it was set on the
	// command line or in the config file, as LightningCLI's
	// link_arguments: {From: "max-epochs", To: "cosine-epochs"}.
	Links []Link
	// Callbacks, when set, adds callbacks and loggers to the trainer's
	// configuration once the flags are parsed.
	Callbacks func(s *Settings, cfg *trainer.Config) error
	// Stdout receives the JSON summary and -h; nil: os.Stdout.
	Stdout io.Writer
	// Stderr receives progress, the model summary and the profiler's
	// report (trainer.Config.Out); nil: os.Stderr.
	Stderr io.Writer
}

// Link copies the value of the flag From into the flag To, unless To was
// set on the command line or in the config file.
type Link struct{ From, To string }

// commands are the subcommands, in the order -h lists them.
var commands = []struct{ Name, Help string }{
	{"fit", "train (resuming from -ckpt-path), then test the trained weights when the data has a test split (the default)"},
	{"validate", "run the validation loop once on -ckpt-path's weights"},
	{"test", "run the test loop once on -ckpt-path's weights"},
	{"predict", "run the predict loop on -ckpt-path's weights; -predictions FILE keeps the outputs"},
	{"lr-find", "run the learning-rate range test on the training data (Lightning's lr_find: rates from 1e-8 to 1 over 100 steps, one device) and print the suggested rate; writes no run directory"},
}

// Main runs the program on os.Args and exits: 0 on success and after -h,
// 130 or 143 after SIGINT or SIGTERM (the run saved), 1 on any error,
// printed as one sentence without a panic trace. Under fulgur run (or
// FULGUR_MAX_RESTARTS), whose terminal shows every rank's output, a stop
// is told once, by each machine's first rank: rank 0 with the command
// that resumes the run.
func (a App) Main() {
	if err := a.Run(context.Background(), os.Args[1:]); err != nil {
		fail(a.Name, err)
	}
}

// group is one section of flags: trainer, model or data.
type group struct {
	name   string
	fields []*field
}

// parsed is the outcome of reading the command line and the config file.
type parsed struct {
	command string
	s       *Settings
	fs      *flag.FlagSet
	groups  []group
	byName  map[string]*field
	set     map[string]bool // given on the command line or in the config file
	config  string
	print   bool
}

// Run is Main without the exit. It returns flag.ErrHelp after -h.
//
// A rank of a job that a launcher started (fulgur run, torchrun-style
// variables, srun, mpirun) that fails before it joins the other ranks (a
// bad flag, a -ckpt-path or dataset missing on its machine) tells them
// why through rank 0's rendezvous before it returns (ddp.AbortJoin), so
// that they end at once naming it rather than wait FULGUR_TIMEOUT.
func (a App) Run(ctx context.Context, args []string) (err error) {
	defer func() {
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			a.abortJoin(ctx, err)
		}
	}()
	return a.run(ctx, args)
}

// abortJoin tells the job this process belongs to, if any, that it
// failed before joining it (ddp.AbortJoin, a no-op otherwise).
func (a App) abortJoin(ctx context.Context, cause error) {
	env, found, err := cluster.Detect(cluster.OSLookup)
	if err != nil || !found || env.WorldSize < 2 {
		return
	}
	// Rank 0 may take a while to listen (it loads its data first), and
	// rank 0 itself waits for every rank to ask: say why this process
	// has not ended yet.
	note := time.AfterFunc(3*time.Second, func() {
		until := "rank 0 at " + net.JoinHostPort(env.MasterAddr, strconv.Itoa(env.MasterPort)) + " has told every rank why"
		if env.Rank == 0 {
			until = "every other rank has reached it to hear why"
		}
		fmt.Fprintf(a.stderr(), "%s: rank %d failed before the job met; it ends once %s (at most FULGUR_TIMEOUT; Ctrl-C ends it now)\n", a.Name, env.Rank, until)
	})
	defer note.Stop()
	if err := ddp.AbortJoin(ctx, nil, cause); err != nil {
		fmt.Fprintf(a.stderr(), "%s: could not tell the other ranks why this rank failed: %v\n", a.Name, err)
	}
}

func (a App) run(ctx context.Context, args []string) error {
	t0 := time.Now()
	p, err := a.parse(args)
	if err != nil {
		return err
	}
	if p.print {
		followers := map[string]string{}
		for _, l := range a.Links {
			if !p.set[l.To] {
				followers[l.To] = l.From
			}
		}
		return printConfig(a.stdout(), p.groups, followers)
	}
	if a.Model == nil {
		return errors.New("cli: App.Model is nil: give the module to train")
	}
	if a.Data == nil {
		return errors.New("cli: App.Data is nil: give a DataModule such as &cli.FashionMNIST{}")
	}
	s := p.s
	loaders, err := a.Data.Loaders(s.Seed)
	if err != nil {
		return err
	}
	if err := loaders.check(p.command, a.Data); err != nil {
		return err
	}
	training := p.command == "fit"
	if s.Weights != "" && !training {
		return fmt.Errorf("-weights %s: fit starts from weights; %s evaluates the weights of -ckpt-path (a file, last or best)", s.Weights, p.command)
	}
	if s.Weights != "" && s.CkptPath != "" {
		return fmt.Errorf("-weights %s and -ckpt-path %s: -ckpt-path resumes a run (weights, optimizer, epoch), -weights starts a new one from weights only; give one", s.Weights, s.CkptPath)
	}
	ckpt := "" // the weights validate, test and predict evaluate
	if !training && s.CkptPath != "" {
		// Resolved before anything is built, so a wrong path leaves no run
		// directory behind.
		if ckpt, err = trainer.ResolveCheckpoint(s.root(), s.CkptPath); err != nil {
			return fmt.Errorf("-ckpt-path %s: %w", s.CkptPath, err)
		}
	}
	cfg := s.trainerConfig()
	cfg.SameOnEveryRank = sameOnEveryRank(p.fs)
	if a.Stderr != nil {
		cfg.Out = a.Stderr
	}
	if p.command == "lr-find" {
		if cfg.Profiler, err = newProfiler(s.Profiler, filepath.Join(s.root(), "profiles")); err != nil {
			return err
		}
		return a.lrFind(ctx, cfg, loaders, t0)
	}
	runs, err := s.setupRun(&cfg, hparams(p.fs), training)
	if err != nil {
		return err
	}
	// Each run's profiles beside its run directory's name (the run
	// directory itself is made by Fit, which picks a new version when one
	// exists already): ROOT/profiles/version_N.
	profDir := filepath.Join(s.root(), "profiles")
	if runs.RunDir != "" {
		profDir = filepath.Join(profDir, filepath.Base(runs.RunDir))
	}
	if cfg.Profiler, err = newProfiler(s.Profiler, profDir); err != nil {
		return err
	}
	if training {
		cfg.Callbacks = append(cfg.Callbacks, hparamsAtFitStart{&runs})
	}
	if training && !s.NoPlots {
		if err := addPlots(s, &cfg, a.stderr()); err != nil {
			return err
		}
	}
	if a.Callbacks != nil {
		if err := a.Callbacks(s, &cfg); err != nil {
			return err
		}
	}
	tr, err := trainer.New(cfg)
	if err != nil {
		return err
	}
	defer closeProfiler(tr.Config().Profiler)
	cfg = tr.Config()
	ev := cfg.Log.Info().Str("data", loaders.Source).Str("command", p.command)
	if loaders.Train != nil {
		ev = ev.Int("train", loaders.Train.Dataset().Len())
	}
	if loaders.Test != nil {
		ev = ev.Int("test", loaders.Test.Dataset().Len())
	}
	ev.Msg(a.Name)
	sum := Summary{Program: a.Name, Command: p.command, Strategy: cfg.Strategy,
		Data: loaders.Source, Seed: s.Seed, RunDir: runs.RunDir}
	if training {
		return a.fit(ctx, tr, loaders, runs, s, sum, args, t0)
	}
	return a.evaluate(ctx, tr, p.command, ckpt, s.Predictions, loaders, runs, sum, t0)
}

func (a App) stderr() io.Writer {
	if a.Stderr == nil {
		return os.Stderr
	}
	return a.Stderr
}

func (a App) stdout() io.Writer {
	if a.Stdout == nil {
		return os.Stdout
	}
	return a.Stdout
}

// restartsLeft says whether this rank runs under an elastic supervisor
// that restarts the job after a failure (restarts left), from the run's
// last checkpoint, so that no one needs the command that resumes it.
func restartsLeft() bool {
	n, err := strconv.Atoi(os.Getenv(launch.EnvRestartCount))
	k, kerr := strconv.Atoi(os.Getenv(launch.EnvMaxRestarts))
	return err == nil && kerr == nil && n < k
}

// runCheckpoint is the checkpoint of the run in logDir to resume from
// after a failure: its newest last.ckpt (or the checkpoint an interrupt
// saved), else the newest one ModelCheckpoint kept; "" when it saved none.
func runCheckpoint(logDir string) string {
	if logDir == "" {
		return ""
	}
	if p, err := trainer.ResolveCheckpoint(logDir, trainer.CkptLast); err == nil {
		return p
	}
	p, _ := trainer.LatestCheckpoint(logDir)
	return p
}

// fit trains, then tests when the data has a test split, and prints the
// summary on rank 0.
func (a App) fit(ctx context.Context, tr *trainer.Trainer, l Loaders, runs runOutputs, s *Settings, sum Summary, args []string, t0 time.Time) error {
	var opts []trainer.FitOption
	if runs.CkptPath != "" {
		opts = append(opts, trainer.FromCheckpoint(runs.CkptPath))
	}
	if s.Weights != "" {
		opts = append(opts, trainer.WithWeights(s.Weights, s.weightsOptions()...))
	}
	// SIGINT and SIGTERM during Fit are the trainer's: it finishes the
	// step, saves a checkpoint and returns a *trainer.InterruptedError,
	// which Main turns into the exit status 130 or 143.
	// A model without a ValidationStep (or TestStep) trains without the
	// data's validation (or test) split, which the trainer would refuse:
	// the command line has no way to leave a split out.
	val := l.Val
	if _, ok := a.Model.(module.Validator); !ok {
		val = nil
	}
	err := tr.Fit(ctx, a.Model, l.Train, val, opts...)
	fill := func(hash string) {
		st := tr.Stats()
		sum.TrainSamplesPerS, sum.Epochs, sum.GlobalStep, sum.WorldSize = math.Round(st.TrainSamplesPerS), st.Epochs, st.GlobalStep, st.WorldSize
		sum.WeightsSHA256, sum.Seconds = hash, since(t0)
	}
	var ie *trainer.InterruptedError
	if errors.As(err, &ie) {
		defer tr.Teardown(ctx)
		// Every rank: under fsdp the hash gathers the shards. The
		// checkpoint is saved already; a failure only leaves the hash out.
		hash, herr := tr.WeightsSHA256(ctx)
		if herr != nil {
			fmt.Fprintf(a.stderr(), "%s: the summary has no weights_sha256: %v\n", a.Name, herr)
		}
		if !tr.IsGlobalZero() {
			return &Interrupted{Err: ie, quiet: besideFirstRank()}
		}
		fill(hash)
		sum.Interrupted, sum.Checkpoint = true, ie.Checkpoint
		if perr := sum.Print(a.stdout()); perr != nil {
			return perr
		}
		if ie.Checkpoint == "" {
			return &Interrupted{Err: ie} // stopped before training: nothing to resume
		}
		return &Interrupted{Err: ie, Resume: resumeCommand(a.Name, args, ie.Checkpoint)}
	}
	if err != nil {
		if tr.IsGlobalZero() && !restartsLeft() && (errors.Is(err, collective.ErrPeerLost) || errors.Is(err, collective.ErrTimeout)) {
			if ckpt := runCheckpoint(tr.LogDir()); ckpt != "" {
				return fmt.Errorf("%w\nthe run saved %s before the failure; once every rank can run again, resume with:\n  %s", err, ckpt, resumeCommand(a.Name, args, ckpt))
			}
		}
		return err
	}
	if tr.IsWorker() {
		return nil
	}
	if _, ok := a.Model.(module.Tester); ok && l.Test != nil {
		res, err := tr.Test(ctx, a.Model, l.Test)
		if err != nil {
			return err
		}
		sum.TestAcc, sum.TestLoss, sum.Metrics = metric(res, "test_acc"), metric(res, "test_loss"), res
	}
	defer tr.Teardown(ctx)
	hash, err := tr.WeightsSHA256(ctx) // every rank: under fsdp it gathers the shards
	if err != nil {
		return err
	}
	if !tr.IsGlobalZero() {
		return nil
	}
	fill(hash)
	return sum.Print(a.stdout())
}

// lrFind runs the learning-rate range test and prints its summary: the
// suggested rate and the curve it came from.
func (a App) lrFind(ctx context.Context, cfg trainer.Config, l Loaders, t0 time.Time) error {
	tr, err := trainer.New(cfg)
	if err != nil {
		return err
	}
	defer tr.Teardown(ctx)
	res, err := tr.LRFind(ctx, a.Model, l.Train, trainer.LRFindConfig{})
	if err != nil {
		return err
	}
	if res.Suggestion > 0 {
		fmt.Fprintf(a.stderr(), "lr-find: the loss fell fastest at learning rate %.3g: train with it (the model's learning-rate flag, -lr in the examples)\n", res.Suggestion)
	} else {
		fmt.Fprintf(a.stderr(), "lr-find: no suggestion: %d steps left too few finite losses to compare (see lr_find.losses)\n", len(res.Losses))
	}
	if res.Stopped != "" {
		fmt.Fprintf(a.stderr(), "lr-find: stopped after %d steps: %s\n", len(res.LRs), res.Stopped)
	}
	sum := Summary{Program: a.Name, Command: "lr-find", Strategy: "single", WorldSize: 1,
		GlobalStep: len(res.LRs), Data: l.Source, Seed: cfg.Seed, Seconds: since(t0),
		LRFind: &LRFindSummary{Suggestion: res.Suggestion, Stopped: res.Stopped, LRs: res.LRs, Losses: res.Losses}}
	return sum.Print(a.stdout())
}

// evaluate runs validate, test or predict on the weights of ckpt ("": the
// freshly initialised ones).
func (a App) evaluate(ctx context.Context, tr *trainer.Trainer, command, ckpt, predictions string, l Loaders, runs runOutputs, sum Summary, t0 time.Time) error {
	defer tr.Teardown(ctx)
	var opts []trainer.EvalOption
	if ckpt != "" {
		opts = append(opts, trainer.WithCheckpoint(ckpt))
	} else {
		fmt.Fprintf(a.stderr(), "%s: no -ckpt-path: evaluating the freshly initialised weights (give -ckpt-path last, best or a file)\n", command)
	}
	var res map[string]float64
	var err error
	switch command {
	case "validate":
		res, err = tr.Validate(ctx, a.Model, l.Val, opts...)
	case "test":
		res, err = tr.Test(ctx, a.Model, l.Test, opts...)
	case "predict":
		err = a.predict(ctx, tr, l.Predict, opts, predictions, &sum)
	}
	if err != nil {
		return err
	}
	// Once the command has run: a checkpoint that does not load leaves no
	// run directory holding only the hyperparameters.
	if err := runs.writeHParams(); err != nil {
		return err
	}
	hash, err := tr.WeightsSHA256(ctx) // every rank: under fsdp it gathers the shards
	if err != nil {
		return err
	}
	if !tr.IsGlobalZero() {
		return nil
	}
	c := tr.Config()
	// The table of -profiler simple or advanced, as Fit prints it (the
	// timeline's files are merged when the profiler closes).
	switch p := c.Profiler.(type) {
	case *profiler.Simple, *profiler.Advanced:
		if err := p.Report(c.Out); err != nil {
			return fmt.Errorf("profiler report: %w", err)
		}
	}
	sum.WeightsSHA256 = hash
	if res != nil {
		sum.Metrics = res
		sum.TestAcc, sum.TestLoss = metric(res, "test_acc"), metric(res, "test_loss")
	}
	sum.Checkpoint, sum.WorldSize = ckpt, max(1, c.Devices)*max(1, c.NumNodes)
	if ckpt != "" {
		// The checkpoint's position, so a summary says which weights it measured.
		if info, err := trainer.ReadCheckpointInfo(ckpt); err == nil {
			sum.Epochs, sum.GlobalStep = info.EpochsDone, info.GlobalStep
		}
	}
	sum.Seconds = since(t0)
	return sum.Print(a.stdout())
}

// predict writes the predictions, one JSON array per row, to path (rank
// 0; "" writes none) and counts the rows.
func (a App) predict(ctx context.Context, tr *trainer.Trainer, l *data.Loader, opts []trainer.EvalOption, path string, sum *Summary) error {
	outs, err := tr.Predict(ctx, a.Model, l, opts...)
	if err != nil {
		return err
	}
	var w *bufio.Writer
	if path != "" && tr.IsGlobalZero() {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("-predictions %s: %w", path, err)
		}
		defer f.Close()
		w = bufio.NewWriter(f)
	}
	for _, t := range outs {
		rows := 1
		if sh := t.Shape(); len(sh) > 0 {
			rows = sh[0]
		}
		sum.Predictions += rows
		if w == nil || rows == 0 {
			continue
		}
		var vals []float64
		switch d := t.Data().(type) {
		case []float32:
			for _, v := range d {
				vals = append(vals, float64(v))
			}
		case []float64:
			vals = d
		default:
			return fmt.Errorf("predict: outputs of type %T cannot be written: return float32 or float64 tensors from PredictStep", d)
		}
		n := len(vals) / rows
		for r := 0; r < rows; r++ {
			b, err := json.Marshal(vals[r*n : (r+1)*n])
			if err != nil {
				return err
			}
			w.Write(b)
			w.WriteByte('\n')
		}
	}
	if w != nil {
		if err := w.Flush(); err != nil {
			return fmt.Errorf("-predictions %s: %w", path, err)
		}
	}
	return nil
}

// parse reads the subcommand, the flags and the config file.
func (a App) parse(args []string) (*parsed, error) {
	p := &parsed{command: "fit", set: map[string]bool{}, byName: map[string]*field{}}
	explicit := len(args) > 0 && !strings.HasPrefix(args[0], "-")
	if explicit {
		if !isCommand(args[0]) {
			return nil, fmt.Errorf("unknown command %q: use %s (see %s -h)", args[0], commandNames(), a.Name)
		}
		p.command, args = args[0], args[1:]
	}
	s := a.Trainer
	p.s = &s
	fs := flag.NewFlagSet(a.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	p.fs = fs
	for _, g := range []struct {
		name string
		v    any
	}{{"trainer", p.s}, {"model", a.Model}, {"data", a.Data}} {
		fields, err := structFields(g.v, g.name)
		if err != nil {
			return nil, fmt.Errorf("cli: %w", err)
		}
		for _, f := range fields {
			if prev, dup := p.byName[f.name]; dup {
				where := groupOf(p.groups, prev)
				if where == "?" {
					where = g.name
				}
				return nil, fmt.Errorf("cli: flag -%s is defined twice (%s and %s): rename one tag", f.name, where, g.name)
			}
			p.byName[f.name] = f
			var v flag.Value = fieldValue{f}
			if f.v.CanAddr() {
				if fv, ok := f.v.Addr().Interface().(flag.Value); ok {
					v = fv
				}
			}
			fs.Var(v, f.name, f.help)
		}
		p.groups = append(p.groups, group{g.name, fields})
	}
	fs.StringVar(&p.config, "config", "", "read flags from this YAML or JSON file (sections trainer:, model:, data:); the command line overrides it")
	fs.BoolVar(&p.print, "print-config", false, "print the settings as a config file and exit")
	for _, arg := range args {
		if arg == "--" {
			break
		}
		if arg == "-h" || arg == "-help" || arg == "--help" || arg == "--h" {
			a.usage(a.stdout(), p)
			return nil, flag.ErrHelp
		}
	}
	// before is what precedes args on the command line, for the
	// corrected one.
	parseErr := func(err error, args, before []string) error {
		// Go's flag package stops at the first unknown flag: name each,
		// with the flag of ours it most likely means, and when there are
		// several, the command line with all of them replaced.
		if strings.HasPrefix(err.Error(), "flag provided but not defined: ") {
			if lines, fixed := unknownFlags(fs, args, a.Name); len(lines) > 0 {
				msg := fmt.Sprintf("%s (see %s -h)", strings.Join(lines, "\n"), a.Name)
				if len(lines) > 1 && fixed != nil {
					msg += "\nwith our flags: " + commandLine(a.Name, append(slices.Clip(before), fixed...))
				}
				return errors.New(msg)
			}
		}
		return fmt.Errorf("%v (see %s -h)", err, a.Name)
	}
	last := args // the arguments parsed last, for a stray value's hint
	var before []string
	if explicit {
		before = []string{p.command}
	}
	parsedArgs, err := parseArgs(fs, args)
	if err != nil {
		return nil, parseErr(err, args, before)
	}
	// A launcher script that puts its flags first (deploy/slurm's passes
	// "-num-nodes N -devices M" and then the user's arguments) still names
	// the command: take it from the first argument after the flags.
	if !explicit && fs.NArg() > 0 && isCommand(fs.Arg(0)) {
		p.command = fs.Arg(0)
		last = fs.Args()[1:]
		// last is the tail of what fs parsed: the same arguments, a
		// count's value joined to it (-fast-dev-run=5).
		if _, err := parseArgs(fs, last); err != nil {
			return nil, parseErr(err, last, parsedArgs[:len(parsedArgs)-len(last)])
		}
	}
	if fs.NArg() > 0 {
		hint := ""
		if at := len(last) - fs.NArg(); at > 0 {
			hint = strayValueHint(fs, last[at-1], fs.Arg(0))
		}
		return nil, fmt.Errorf("unexpected arguments %q: every option is a flag, and the command comes first%s (see %s -h)", fs.Args(), hint, a.Name)
	}
	fs.Visit(func(f *flag.Flag) { p.set[f.Name] = true })
	if p.config != "" {
		if err := applyConfig(p.config, p); err != nil {
			return nil, err
		}
	}
	for _, l := range a.Links {
		from, to := fs.Lookup(l.From), fs.Lookup(l.To)
		if from == nil || to == nil {
			return nil, fmt.Errorf("cli: link %s -> %s: both must be flags of the program", l.From, l.To)
		}
		if !p.set[l.To] {
			if err := to.Value.Set(from.Value.String()); err != nil {
				return nil, fmt.Errorf("cli: link %s -> %s: %w", l.From, l.To, err)
			}
		}
	}
	if p.s.FastDevRun > 0 {
		// -fast-dev-run fixes the run's length itself; a program's
		// default (-max-epochs 1 in the examples) is not the user asking
		// for both, which the trainer may refuse.
		for name, v := range map[string]*int{"max-epochs": &p.s.MaxEpochs, "max-steps": &p.s.MaxSteps,
			"limit-train-batches": &p.s.LimitTrainBatches, "limit-val-batches": &p.s.LimitValBatches,
			"limit-test-batches": &p.s.LimitTestBatches, "limit-predict-batches": &p.s.LimitPredictBatches,
			"val-check-interval": &p.s.ValCheckInterval} {
			if !p.set[name] {
				*v = 0
			}
		}
		if !p.set["check-val-every-n-epoch"] {
			p.s.CheckValEveryNEpoch = 1
		}
	}
	var errs []error
	for _, g := range p.groups {
		for _, f := range g.fields {
			if err := f.validate(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, p.s.validate()...)
	if p.s.NoCheckpoint {
		// As Lightning refuses enable_checkpointing=False beside a
		// ModelCheckpoint: the other flag would be ignored.
		for _, name := range []string{"ckpt-monitor", "ckpt-mode", "ckpt-top-k", "ckpt-every-n-steps"} {
			if p.set[name] && !(name == "ckpt-top-k" && p.s.CkptTopK == 0) { // 0 says none, too
				errs = append(errs, fmt.Errorf("-no-checkpoint and -%s are both set: -no-checkpoint writes no checkpoints, so -%s would be ignored; drop one of them", name, name))
			}
		}
	}
	for _, v := range []any{a.Model, a.Data} {
		if c, ok := v.(interface{ Validate() error }); ok {
			if err := c.Validate(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

func groupOf(groups []group, f *field) string {
	for _, g := range groups {
		for _, x := range g.fields {
			if x == f {
				return g.name
			}
		}
	}
	return "?"
}

func isCommand(s string) bool {
	for _, c := range commands {
		if c.Name == s {
			return true
		}
	}
	return false
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// usage lists the commands and every flag by section.
func (a App) usage(w io.Writer, p *parsed) {
	fmt.Fprintf(w, "Usage: %s [command] [flags]\n", a.Name)
	if a.Description != "" {
		fmt.Fprintf(w, "\n%s\n", a.Description)
	}
	fmt.Fprintf(w, "\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.Name, c.Help)
	}
	for _, g := range append(p.groups, group{name: "config"}) {
		names := make([]string, 0, len(g.fields))
		for _, f := range g.fields {
			names = append(names, f.name)
		}
		if g.name == "config" {
			names = []string{"config", "print-config"}
		}
		if len(names) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s flags:\n", strings.ToUpper(g.name[:1])+g.name[1:])
		sort.Strings(names)
		for _, n := range names {
			fl := p.fs.Lookup(n)
			kind := valueKind(fl.Value)
			if n == "config" {
				kind = " file"
			}
			fmt.Fprintf(w, "  -%s%s\n    \t%s", n, kind, fl.Usage)
			for _, l := range a.Links {
				if l.To == n {
					fmt.Fprintf(w, " (default: the value of -%s)", l.From)
				}
			}
			if def := fl.DefValue; def != "" && def != "0" && def != "false" && def != "0s" {
				if strings.HasPrefix(kind, " string") {
					def = strconv.Quote(def)
				}
				fmt.Fprintf(w, " (default %s)", def)
			}
			fmt.Fprintln(w)
		}
	}
}

func valueKind(v flag.Value) string {
	if b, ok := v.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		if _, count := v.(*Count); count {
			return " [N]"
		}
		return ""
	}
	if fv, ok := v.(fieldValue); ok {
		switch {
		case fv.f.v.Type() == durationType:
			return " duration"
		case fv.f.v.Kind() == reflect.String:
			if len(fv.f.choices) > 0 {
				return " " + strings.Join(fv.f.choices, "|")
			}
			return " string"
		case fv.f.v.CanFloat():
			return " number"
		case fv.f.v.CanInt(), fv.f.v.CanUint():
			return " int"
		case fv.f.v.Kind() == reflect.Slice:
			return " ints"
		}
	}
	if _, ok := v.(interface{ Get() any }); ok {
		return " value"
	}
	return " string"
}

// parseArgs parses args into fs, and returns them as fs read them. A
// count flag that may be given bare (-fast-dev-run) also takes its value
// as the next argument when that is a number, "-fast-dev-run 5" (read as
// "-fast-dev-run=5"): Go's flag package would read a bare flag and then a
// stray argument "5".
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
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
			if _, ok := fl.Value.(*Count); ok {
				if _, err := strconv.Atoi(args[i+1]); err == nil {
					out[len(out)-1] = a + "=" + args[i+1]
					i++
				}
			}
		}
	}
	return out, fs.Parse(out)
}
