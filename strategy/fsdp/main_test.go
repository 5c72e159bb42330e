package fsdp_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// programEnv makes the test binary a small training program: the
// multi-process test starts it, and fsdp (through ddp's launcher)
// re-executes it for the other local ranks as it would a user's program.
const programEnv = "FULGUR_FSDP_TEST_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(programEnv) != "" {
		if err := runProgram(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "program:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Choose the matrix multiply before any test multiplies, as a program
	// does at start: the trainer's tests choose it again (the same one),
	// which fails once another has been used.
	if _, err := blas.Choose(zerolog.Nop(), blas.ChooseOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, "blas.Choose:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

var programModel = &deepMLP{Sizes: []int{in, 12, 9, out}, Opt: "adam", LR: 0.01}

// runProgram trains programModel through the trainer with the strategy
// named by -strategy on -devices processes (rows strided across ranks, in
// order), and writes the final checkpoint to -ckpt.
func runProgram(ctx context.Context, args []string) (err error) {
	fs := flag.NewFlagSet("program", flag.ContinueOnError)
	strat := fs.String("strategy", "single", "")
	devices := fs.Int("devices", 1, "")
	nodes := fs.Int("nodes", 1, "")
	batch := fs.Int("batch", 4, "per-rank batch")
	ckpt := fs.String("ckpt", "", "checkpoint written after Fit")
	mark := fs.String("mark", "", "each process writes rank_<rank> here after Fit")
	epochs := fs.Int("epochs", 2, "")
	sharded := fs.Bool("sharded", false, "write the checkpoint sharded (Config.ShardedCheckpoint)")
	resume := fs.String("resume", "", "checkpoint Fit resumes from")
	errs := fs.String("errors", "", "each process writes its error to err_<rank> here")
	accum := fs.Int("accum", 1, "AccumulateGradBatches")
	logTo := fs.String("log", "", "the trainer's output goes to this file")
	rootDir := fs.String("root", "", "the trainer's root directory (default: a new temporary one)")
	every := fs.Int("every", 0, "a ModelCheckpoint saves last.ckpt every this many steps")
	dieAt := fs.Int("die-at", 0, "rank 1 SIGKILLs itself at this step, before the ModelCheckpoint's save, in an elastic job's first attempt, after writing died_rank1 under -root")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *errs != "" {
		defer func() {
			if err != nil {
				rank := os.Getenv("RANK") // set for the ranks the launcher started
				if rank == "" {
					rank = "0"
				}
				os.WriteFile(filepath.Join(*errs, "err_"+rank), []byte(err.Error()), 0o644)
			}
		}()
	}
	ds, err := strategytest.Regression(48, in, out, 1)
	if err != nil {
		return err
	}
	train, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: *batch})
	if err != nil {
		return err
	}
	root := *rootDir
	if root == "" {
		if root, err = os.MkdirTemp("", "fulgur-fsdp-program-"); err != nil {
			return err
		}
		defer os.RemoveAll(root)
	}
	var cbs []trainer.Callback
	if *dieAt > 0 {
		cbs = append(cbs, dieAtStep{*dieAt, root})
	}
	if *every > 0 {
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{EveryNTrainSteps: *every, LastOnly: true})
		if err != nil {
			return err
		}
		cbs = append(cbs, mc)
	}
	var out io.Writer = io.Discard
	if *logTo != "" {
		f, err := os.Create(*logTo)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	tr, err := trainer.New(trainer.Config{MaxEpochs: *epochs, Seed: 5, Strategy: *strat, Devices: *devices, NumNodes: *nodes, ShardedCheckpoint: *sharded, AccumulateGradBatches: *accum,
		Callbacks: cbs, Out: out, EnableProgressBar: trainer.Bool(false), DefaultRootDir: root})
	if err != nil {
		return err
	}
	// Torn down after a failed Fit too: rank 0 then waits for the ranks it
	// started.
	defer tr.Teardown(ctx)
	var opts []trainer.FitOption
	if *resume != "" {
		opts = append(opts, trainer.FromCheckpoint(*resume))
	}
	if err := tr.Fit(ctx, programModel, train, nil, opts...); err != nil {
		return err
	}
	if *mark != "" {
		rank := os.Getenv("RANK") // set for the ranks the launcher started
		if tr.IsGlobalZero() {
			rank = "0"
		}
		if err := os.WriteFile(filepath.Join(*mark, "rank_"+rank), []byte(fmt.Sprint(tr.Stats().WorldSize)), 0o644); err != nil {
			return err
		}
	}
	return tr.SaveCheckpoint(ctx, *ckpt)
}

// dieAtStep is -die-at: rank 1 of an elastic job's first attempt
// SIGKILLs itself at a step, before the callbacks after it run.
type dieAtStep struct {
	step int
	dir  string
}

func (d dieAtStep) Name() string { return "dieAtStep" }
func (d dieAtStep) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.Rank == 1 && s.GlobalStep == d.step && os.Getenv("FULGUR_RESTART_COUNT") == "0" {
		if err := os.WriteFile(filepath.Join(d.dir, "died_rank1"), nil, 0o644); err != nil {
			return err
		}
		return killSelf()
	}
	return nil
}

func program(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), programEnv+"=1", "FULGUR_TIMEOUT=60s")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out.String())
	}
}

// programFails runs the program as program does, wanting it to fail, and
// returns its output.
func programFails(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), programEnv+"=1", "FULGUR_TIMEOUT=60s")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("%v: succeeded, want it to fail\n%s", args, out)
	}
	if ctx.Err() != nil {
		t.Fatalf("%v: still running after 120 s\n%s", args, out)
	}
	return string(out)
}

func weights(t *testing.T, path string) *module.Store { return loadInto(t, programModel, path) }

// loadInto loads the checkpoint at path into a store of m's tensors.
func loadInto(t *testing.T, m module.Module, path string) *module.Store {
	t.Helper()
	b := module.NewBuilder(tensor.Float32)
	if err := m.Configure(b); err != nil {
		t.Fatal(err)
	}
	specs, err := b.Specs()
	if err != nil {
		t.Fatal(err)
	}
	st, err := module.NewStore(specs, tensor.Float32, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := trainer.LoadWeights(path, st); err != nil {
		t.Fatal(err)
	}
	return st
}

// trainer.Config{Strategy: "fsdp", Devices: 2} starts a second process
// (ddp's launcher), trains over tcp and checkpoints the gathered weights:
// they are one device's with the global batch, within float32 tolerance.
func TestFSDPByNameInTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	got, want := filepath.Join(dir, "fsdp.ckpt"), filepath.Join(dir, "single.ckpt")
	program(t, "-strategy", "fsdp", "-devices", "2", "-batch", "4", "-ckpt", got, "-mark", dir)
	for _, r := range []string{"0", "1"} {
		if b, err := os.ReadFile(filepath.Join(dir, "rank_"+r)); err != nil || string(b) != "2" {
			t.Fatalf("process of rank %s: %q, %v: want it to have trained in a world of 2", r, b, err)
		}
	}
	program(t, "-strategy", "single", "-devices", "1", "-batch", "8", "-ckpt", want)
	closeToOneDevice(t, got, want, "fsdp on 2 processes")
}

// closeToOneDevice compares the weights checkpointed at got, by what, with
// one device's at want, within float32 tolerance.
func closeToOneDevice(t *testing.T, got, want, what string) {
	t.Helper()
	sameWeights(t, what, weights(t, got).Data32(), "one device", weights(t, want).Data32())
}

// sameWeights fails t unless the weights got (of what) are want's (of
// than) within float32 tolerance, and logs the largest difference.
func sameWeights(t *testing.T, what string, got []float32, than string, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d weights, %s %d", what, len(got), than, len(want))
	}
	worst := 0.0
	for i, w := range want {
		d := math.Abs(float64(got[i] - w))
		worst = math.Max(worst, d)
		if d > 1e-5+1e-4*math.Abs(float64(w)) {
			t.Fatalf("weight %d after 2 epochs: %s %g, %s %g", i, what, got[i], than, w)
		}
	}
	t.Logf("%s: largest difference from %s: %.3g", what, than, worst)
}

// The trainer's gradient accumulation (3 batches a step) on 2 fsdp
// processes, with micro-batches that reduce-scatter nothing (the default)
// and with FULGUR_FSDP_SYNC_MICROBATCHES=1, trains as one device does with
// the same global batches.
func TestFSDPAccumulatesInTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	want := filepath.Join(dir, "single.ckpt")
	program(t, "-strategy", "single", "-devices", "1", "-batch", "4", "-accum", "3", "-ckpt", want)
	w := weights(t, want).Data32()
	for _, sync := range []string{"0", "1"} {
		t.Setenv(fsdp.EnvSyncMicroBatches, sync)
		got := filepath.Join(dir, "fsdp"+sync+".ckpt")
		program(t, "-strategy", "fsdp", "-devices", "2", "-batch", "2", "-accum", "3", "-ckpt", got)
		sameWeights(t, fsdp.EnvSyncMicroBatches+"="+sync+" on 2 processes", weights(t, got).Data32(), "one device", w)
	}
}
