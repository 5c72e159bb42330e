package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

// ImageJob describes an example that trains a classifier on Fashion-MNIST.
type ImageJob struct {
	Program string
	// NewModule makes the module from the parsed flags.
	NewModule func(f *Flags) module.Module
	Defaults  Flags
	// DropLast drops the last partial training batch (the benchmark
	// workloads do; the default trains on it).
	DropLast bool
	// Stdout receives the JSON summary; nil: os.Stdout.
	Stdout io.Writer
	// Stderr receives progress, the model summary and the profiler's
	// report (trainer.Config.Out); nil: os.Stderr.
	Stderr io.Writer
	// Hooks let other packages add callbacks and loggers from the flags.
	Extra func(f *Flags, cfg *trainer.Config) error
	// Flags adds the program's own flags; CheckFlags, when set, validates
	// them after parsing.
	Flags      func(fs *flag.FlagSet)
	CheckFlags func() error
}

// Main parses args, trains, tests and prints the summary; it is the whole
// main function of an example.
func (j ImageJob) Main(args []string) {
	if err := j.Run(context.Background(), args); err != nil {
		Fail(j.Program, err)
	}
}

// Run is Main without the exit.
func (j ImageJob) Run(ctx context.Context, args []string) error {
	t0 := time.Now()
	fs := flag.NewFlagSet(j.Program, flag.ContinueOnError)
	var f Flags
	f.Register(fs, j.Defaults)
	dropLast := fs.Bool("drop-last", j.DropLast, "drop the last partial training batch")
	if j.Flags != nil {
		j.Flags(fs)
	}
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v: every option is a flag (see -h)", fs.Args())
	}
	if err := f.Validate(); err != nil {
		return err
	}
	if j.CheckFlags != nil {
		if err := j.CheckFlags(); err != nil {
			return err
		}
	}
	train, test, source, err := data.OpenFashionMNIST(f.Data)
	if err != nil {
		return err
	}
	trainL, err := data.NewLoader(train, data.LoaderConfig{BatchSize: f.BatchSize, Shuffle: true, DropLast: *dropLast, Seed: f.Seed})
	if err != nil {
		return err
	}
	testL, err := data.NewLoader(test, data.LoaderConfig{BatchSize: max(f.BatchSize, 256)})
	if err != nil {
		return err
	}
	cfg, err := f.TrainerConfig()
	if err != nil {
		return err
	}
	if j.Stderr != nil {
		cfg.Out = j.Stderr
	}
	runs, err := f.SetupRun(&cfg, HParams(fs))
	if err != nil {
		return err
	}
	if err := AddPlots(&f, &cfg); err != nil {
		return err
	}
	if j.Extra != nil {
		if err := j.Extra(&f, &cfg); err != nil {
			return err
		}
	}
	tr, err := trainer.New(cfg)
	if err != nil {
		return err
	}
	if err := runs.WriteHParams(); err != nil {
		return err
	}
	// SIGINT and SIGTERM during Fit are the trainer's: it finishes the
	// step, saves a checkpoint and returns a *trainer.InterruptedError
	// (HandleSignals), which Main turns into the exit status 130 or 143.
	defer closeProfiler(tr.Config().Profiler)
	m := j.NewModule(&f)
	cfg = tr.Config()
	cfg.Log.Info().Str("data", source).Int("train", train.Len()).Int("test", test.Len()).Msg(j.Program)
	var opts []trainer.FitOption
	if runs.CkptPath != "" {
		opts = append(opts, trainer.FromCheckpoint(runs.CkptPath))
	}
	// The test split doubles as the validation set, as in Lightning's
	// MNIST examples: nothing is selected on it.
	err = tr.Fit(ctx, m, trainL, testL, opts...)
	out := j.Stdout
	if out == nil {
		out = os.Stdout
	}
	var ie *trainer.InterruptedError
	if errors.As(err, &ie) {
		defer tr.Teardown(ctx)
		if !tr.IsGlobalZero() {
			return &Interrupted{Err: ie}
		}
		st := tr.Stats()
		if perr := (Summary{
			Program: j.Program, TestAcc: -1, TestLoss: -1, TrainSamplesPerS: math.Round(st.TrainSamplesPerS), Epochs: st.Epochs,
			GlobalStep: st.GlobalStep, WorldSize: st.WorldSize, Strategy: cfg.Strategy, WeightsSHA256: tr.Store().SHA256(),
			Data: source, Seconds: Since(t0), Seed: f.Seed, Interrupted: true, Checkpoint: ie.Checkpoint, RunDir: runs.RunDir,
		}.Print(out)); perr != nil {
			return perr
		}
		return &Interrupted{Err: ie, Resume: resumeCommand(j.Program, args, ie.Checkpoint)}
	}
	if err != nil {
		return err
	}
	if tr.IsWorker() {
		return nil
	}
	res, err := tr.Test(ctx, m, testL)
	if err != nil {
		return err
	}
	defer tr.Teardown(ctx)
	if !tr.IsGlobalZero() {
		return nil
	}
	st := tr.Stats()
	return Summary{
		Program: j.Program, TestAcc: finite(res["test_acc"]), TestLoss: finite(res["test_loss"]),
		TrainSamplesPerS: math.Round(st.TrainSamplesPerS), Epochs: st.Epochs, GlobalStep: st.GlobalStep,
		WorldSize: st.WorldSize, Strategy: cfg.Strategy, WeightsSHA256: tr.Store().SHA256(), Data: source,
		Seconds: Since(t0), Seed: f.Seed, RunDir: runs.RunDir,
	}.Print(out)
}

func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return -1
	}
	return v
}

// Interrupted is Run's error when a signal or a cancelled context stopped
// training after saving a checkpoint: Main prints it with the command that
// resumes the run and exits with Err.ExitCode() (130 for SIGINT, 143 for
// SIGTERM).
type Interrupted struct {
	Err *trainer.InterruptedError
	// Resume is the command line that continues the run ("" on ranks
	// other than 0).
	Resume string
}

func (e *Interrupted) Error() string {
	if e.Resume == "" {
		return e.Err.Error()
	}
	return fmt.Sprintf("training interrupted at global step %d; checkpoint saved to %s; resume with:\n  %s", e.Err.GlobalStep, e.Err.Checkpoint, e.Resume)
}

func (e *Interrupted) Unwrap() error { return e.Err }

// resumeCommand is the program's command line with -ckpt-path set to ckpt
// (replacing one given), quoted for a POSIX shell.
func resumeCommand(prog string, args []string, ckpt string) string {
	words := []string{prog}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := strings.TrimLeft(a, "-")
		if name == "ckpt-path" && len(a) > len(name) {
			i++ // its value is the next argument
			continue
		}
		if strings.HasPrefix(name, "ckpt-path=") && len(a) > len(name) {
			continue
		}
		words = append(words, a)
	}
	words = append(words, "-ckpt-path", ckpt)
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	return strings.Join(words, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./,:+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
