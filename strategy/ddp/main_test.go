package ddp_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/launch"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// programEnv makes the test binary act as a small training program instead
// of running tests: the multi-process tests start it, and DDP re-executes it
// for its other ranks exactly as it would a user's program.
const programEnv = "FULGUR_STRATEGY_TEST_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(programEnv) != "" {
		if err := runProgram(context.Background(), os.Args[1:], os.Stdout, nil); err != nil {
			fmt.Fprintln(os.Stderr, "program:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The trainer picks the matrix multiply once per process, before any
	// graph runs, and fails if one already ran: pick it here, as a program
	// starting its trainer would, so that tests running graphs without a
	// trainer may come before the in-process trainer tests.
	if _, err := blas.Choose(zerolog.Nop(), blas.ChooseOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, "blas:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// programResult is the JSON line rank 0 prints.
type programResult struct {
	SHA256     string  `json:"weights_sha256"`
	ValLoss    float64 `json:"val_loss"`
	WorldSize  int     `json:"world_size"`
	GlobalStep int     `json:"global_step"`
	Strategy   string  `json:"strategy"`
	Params     []float32
	Preds      []float32 // Predict after Fit on a fresh module value (-fresh)

	// With -ckpt-dir: the callbacks' values in the process that called Fit.
	BestModelPath  string
	BestModelScore float64
	StopReason     string
	StoppedEpoch   int
}

// dying kills its own process at a given batch on a given rank (a crash).
type dying struct {
	*strategytest.MLP
	rank, batch int
	stop        bool // SIGSTOP instead of SIGKILL: a rank that hangs
}

func (d *dying) OnTrainBatchStart(ctx context.Context, b *data.Batch, batchIdx int) error {
	if r, _ := strconv.Atoi(os.Getenv("RANK")); r == d.rank && batchIdx == d.batch {
		if d.stop {
			stopSelf()
		} else {
			kill(os.Getpid())
		}
	}
	return nil
}

// panicky panics in TrainingStep on one rank (a bug in the user's step).
type panicky struct {
	*dying
	rank int
}

func (p *panicky) TrainingStep(s *module.Step) (*G.Node, error) {
	if r, _ := strconv.Atoi(os.Getenv("RANK")); r == p.rank {
		panic(fmt.Sprintf("user step failed on rank %d", r)) // the line rank_N.log must name
	}
	return p.dying.TrainingStep(s)
}

// runProgram trains the strategytest MLP. impl, when set, is used instead
// of the strategy named by -strategy (in-process ranks).
func runProgram(ctx context.Context, args []string, stdout io.Writer, impl strategy.Strategy) (err error) {
	fs := flag.NewFlagSet("program", flag.ContinueOnError)
	strat := fs.String("strategy", "single", "")
	devices := fs.Int("devices", 1, "")
	nodes := fs.Int("num-nodes", 1, "")
	epochs := fs.Int("epochs", 2, "")
	batch := fs.Int("batch", 4, "per-rank batch")
	rows := fs.Int("rows", 90, "")
	dieRank := fs.Int("die-rank", -1, "")
	dieBatch := fs.Int("die-batch", 3, "")
	panicRank := fs.Int("panic-rank", -1, "")
	stopRank := fs.Int("stop-rank", -1, "this rank stops itself (SIGSTOP) at -die-batch")
	fresh := fs.Bool("fresh", false, "validate and predict after Fit on a module value built again")
	versionDir := fs.String("versiondir", "", "every rank writes trainer.VersionDir(root, \"\"), before its trainer, to this path + \".rank<R>\"")
	quitRank := fs.Int("quit-rank", -1, "this rank's program prints a line and returns normally after Fit, without Validate")
	afterRank0 := fs.String("after-rank0", "", "rank 0 returns without Teardown; the other ranks write this file once rank 0's process is gone")
	root := fs.String("root", "", "the trainer's root directory (\"\": a temporary one)")
	ckptDir := fs.String("ckpt-dir", "", "add a ModelCheckpoint writing here and an EarlyStopping")
	cancelBatch := fs.Int("cancel-step", -1, "rank 0 cancels its Fit's context at the end of this global step's batch")
	cancelParent := fs.String("cancel-parent", "", "ddp_spawn: worker 0 creates this file at step 3, and the launching process cancels its Fit's context once it exists")
	withVal := fs.Bool("val", false, "validate during Fit, after every epoch (and a sanity check before training)")
	valEvery := fs.Int("val-check-interval", 0, "with -val, validate every this many training batches too")
	accumulate := fs.Int("accumulate", 0, "AccumulateGradBatches")
	cancelWhere := fs.String("cancel-in", "", "rank 0 cancels its Fit's context in the sanity check's first batch (sanity), in epoch 1's first validation batch (validation), in epoch 1's OnTrainEpochStart (epoch-start) or OnTrainEpochEnd, before the epoch's checkpoints (epoch-end), and writes the time (Unix ns) to -root's cancelled-at")
	logStderr := fs.Bool("log-stderr", false, "write the trainer's output (its log) to stderr, not away")
	hookLog := fs.String("hook-log", "", "add a callback that writes the hooks it sees to this path + \".rank<R>\" at fit end, and + \".end<RANK>\" when the program returns")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ds, err := strategytest.Regression(*rows, 6, 2, 1)
	if err != nil {
		return err
	}
	train, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: *batch, Shuffle: true, Seed: 3})
	if err != nil {
		return err
	}
	val, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 16})
	if err != nil {
		return err
	}
	if *root == "" {
		if *root, err = os.MkdirTemp("", "fulgur-program-"); err != nil {
			return err
		}
		defer os.RemoveAll(*root)
	}
	if n := os.Getenv(launch.EnvRestartCount); n != "" {
		// An elastic job's rank: which attempt started it.
		if err := os.WriteFile(filepath.Join(*root, "attempt"+n+".rank"+os.Getenv("RANK")), nil, 0o644); err != nil {
			return err
		}
	}
	if *versionDir != "" {
		d, err := trainer.VersionDir(*root, "")
		if err != nil {
			return err
		}
		rank := os.Getenv("RANK")
		if rank == "" {
			rank = "0" // the process that launches the others
		}
		if err := os.WriteFile(*versionDir+".rank"+rank, []byte(d), 0o644); err != nil {
			return err
		}
	}
	cfg := trainer.Config{MaxEpochs: *epochs, Seed: 5, Strategy: *strat, Devices: *devices, NumNodes: *nodes, StrategyImpl: impl,
		Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: *root, ValCheckInterval: *valEvery, AccumulateGradBatches: *accumulate}
	if *logStderr {
		cfg.Out = os.Stderr
	}
	if impl != nil {
		cfg.Strategy, cfg.Devices, cfg.NumNodes = "", 1, 1
	}
	var mc *callbacks.ModelCheckpoint
	var es *callbacks.EarlyStopping
	if *ckptDir != "" {
		if mc, err = callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: *ckptDir, Monitor: "train_loss_epoch", Filename: "{epoch}"}); err != nil {
			return err
		}
		// Any loss is below the threshold: stops after the first epoch.
		huge := 1e9
		if es, err = callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "train_loss_epoch", StoppingThreshold: &huge, CheckOnTrainEpochEnd: true}); err != nil {
			return err
		}
		cfg.Callbacks = []trainer.Callback{mc, es}
	}
	var hooks *hookNames
	if *hookLog != "" {
		hooks = &hookNames{path: *hookLog}
		cfg.Callbacks = append(cfg.Callbacks, hooks)
		defer func() {
			if werr := hooks.write(".end" + os.Getenv("RANK")); err == nil {
				err = werr
			}
		}()
	}
	if r := os.Getenv("RANK"); *cancelBatch >= 0 && (r == "" || r == "0") {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		cfg.Callbacks = append(cfg.Callbacks, &cancelAt{step: *cancelBatch, cancel: cancel})
	}
	if r := os.Getenv("RANK"); *cancelWhere != "" && (r == "" || r == "0") {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		cfg.Callbacks = append(cfg.Callbacks, &cancelIn{where: *cancelWhere, cancel: cancel, mark: filepath.Join(*root, "cancelled-at")})
	}
	if *cancelParent != "" {
		switch os.Getenv("RANK") {
		case "":
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			go func() {
				for {
					if _, err := os.Stat(*cancelParent); err == nil {
						cancel()
						return
					}
					time.Sleep(10 * time.Millisecond) // waiting for another process
				}
			}()
		case "0":
			cfg.Callbacks = append(cfg.Callbacks, touchAt{step: 3, path: *cancelParent})
		}
	}
	tr, err := trainer.New(cfg)
	if err != nil {
		return err
	}
	newModule := func() module.Module {
		d := &dying{MLP: &strategytest.MLP{In: 6, Hidden: 16, Out: 2, Optimizer: "adam", LR: 0.01}, rank: *dieRank, batch: *dieBatch}
		if *stopRank >= 0 {
			d.rank, d.stop = *stopRank, true
		}
		return d
	}
	m := newModule()
	if *panicRank >= 0 {
		m = &panicky{dying: m.(*dying), rank: *panicRank}
	}
	fitVal := (*data.Loader)(nil)
	if *withVal {
		fitVal = val
	}
	if err := tr.Fit(ctx, m, train, fitVal); err != nil {
		return err
	}
	if tr.IsWorker() {
		return fmt.Errorf("a ddp_spawn worker returned from Fit")
	}
	if r, _ := strconv.Atoi(os.Getenv("RANK")); r == *quitRank {
		fmt.Fprintf(stdout, "rank %d gives up after Fit\n", r)
		return nil
	}
	var preds []float32
	if *fresh {
		m = newModule()
		ys, err := tr.Predict(ctx, m, val)
		if err != nil {
			return err
		}
		for _, y := range ys {
			preds = append(preds, y.Float32s()...)
		}
	}
	res, err := tr.Validate(ctx, m, val)
	if err != nil {
		return err
	}
	if *afterRank0 != "" {
		if tr.IsGlobalZero() {
			return json.NewEncoder(stdout).Encode(programResult{SHA256: tr.Store().SHA256()})
		}
		// Work that goes on after rank 0 has returned: it must not be
		// killed mid-way.
		for ppid := os.Getppid(); os.Getppid() == ppid; {
			time.Sleep(10 * time.Millisecond) // waiting for another process
		}
		return os.WriteFile(*afterRank0, []byte("rank "+os.Getenv("RANK")+" finished after rank 0 returned\n"), 0o644)
	}
	defer tr.Teardown(ctx)
	if !tr.IsGlobalZero() {
		return nil
	}
	st := tr.Stats()
	pr := programResult{SHA256: tr.Store().SHA256(), ValLoss: res["val_loss"],
		WorldSize: st.WorldSize, GlobalStep: st.GlobalStep, Strategy: *strat, Params: tr.Store().Data32(), Preds: preds}
	if mc != nil {
		pr.BestModelPath, pr.BestModelScore, pr.StopReason, pr.StoppedEpoch = mc.BestModelPath(), mc.BestModelScore(), es.Reason(), es.StoppedEpoch()
	}
	return json.NewEncoder(stdout).Encode(pr)
}

// cancelIn cancels its Fit's context once, at the point where names,
// outside the training steps, and writes the time it did to mark.
type cancelIn struct {
	where  string
	cancel context.CancelFunc
	mark   string
	done   bool
}

func (*cancelIn) Name() string { return "cancelIn" }

func (c *cancelIn) fire(where string) error {
	if c.done || where != c.where {
		return nil
	}
	c.done = true
	c.cancel()
	return os.WriteFile(c.mark, []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o644)
}

func (c *cancelIn) OnValidationBatchEnd(_ context.Context, s *trainer.State) error {
	switch {
	case s.SanityChecking:
		return c.fire("sanity")
	case s.Epoch == 1:
		return c.fire("validation")
	}
	return nil
}

func (c *cancelIn) OnTrainEpochStart(_ context.Context, s *trainer.State) error {
	if s.Epoch != 1 {
		return nil
	}
	return c.fire("epoch-start")
}

func (c *cancelIn) OnTrainEpochEnd(_ context.Context, s *trainer.State) error {
	if s.Epoch != 1 {
		return nil
	}
	return c.fire("epoch-end")
}

// touchAt creates a file at the end of a global step's batch.
type touchAt struct {
	step int
	path string
}

func (touchAt) Name() string { return "touchAt" }

func (c touchAt) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	if s.GlobalStep != c.step {
		return nil
	}
	return os.WriteFile(c.path, nil, 0o644)
}

// hookNames records the training hooks its process's callbacks see, and
// writes them, one a line, to path+".rank<R>" at fit end (a ddp_spawn
// worker exits after Fit) and path+suffix when asked.
type hookNames struct {
	path  string
	calls []string
}

func (*hookNames) Name() string { return "hookNames" }

func (h *hookNames) write(suffix string) error {
	return os.WriteFile(h.path+suffix, []byte(strings.Join(h.calls, "\n")), 0o644)
}

func (h *hookNames) on(name string) error { h.calls = append(h.calls, name); return nil }

func (h *hookNames) OnFitStart(context.Context, *trainer.State) error   { return h.on("OnFitStart") }
func (h *hookNames) OnTrainStart(context.Context, *trainer.State) error { return h.on("OnTrainStart") }
func (h *hookNames) OnTrainEpochStart(context.Context, *trainer.State) error {
	return h.on("OnTrainEpochStart")
}
func (h *hookNames) OnTrainBatchStart(context.Context, *trainer.State) error {
	return h.on("OnTrainBatchStart")
}
func (h *hookNames) OnBeforeBackward(context.Context, *trainer.State, float64) error {
	return h.on("OnBeforeBackward")
}
func (h *hookNames) OnBeforeOptimizerStep(context.Context, *trainer.State) error {
	return h.on("OnBeforeOptimizerStep")
}
func (h *hookNames) OnAfterOptimizerStep(context.Context, *trainer.State) error {
	return h.on("OnAfterOptimizerStep")
}
func (h *hookNames) OnTrainBatchEnd(context.Context, *trainer.State) error {
	return h.on("OnTrainBatchEnd")
}
func (h *hookNames) OnTrainEpochEnd(context.Context, *trainer.State) error {
	return h.on("OnTrainEpochEnd")
}
func (h *hookNames) OnTrainEnd(context.Context, *trainer.State) error { return h.on("OnTrainEnd") }
func (h *hookNames) OnValidationEnd(context.Context, *trainer.State) error {
	return h.on("OnValidationEnd")
}
func (h *hookNames) OnException(context.Context, *trainer.State, error) error {
	return h.on("OnException")
}
func (h *hookNames) OnFitEnd(ctx context.Context, s *trainer.State) error {
	h.on("OnFitEnd")
	return h.write(fmt.Sprintf(".rank%d", s.Rank))
}
