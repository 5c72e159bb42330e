//go:build chaos

package chaos_test

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
	"sync"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// programEnv makes the test binary act as the training program under test:
// the suite starts it, and ddp re-executes it for its other ranks exactly as
// it would a user's program.
const programEnv = "FULGUR_CHAOS_PROGRAM"

// holdEnv names the phase ("setup", "forward", "reduce", "optimizer",
// "validation", "save", "teardown", or "train" for the first training batch
// hook of step 5), the rank and a directory: when that rank reaches the
// phase it writes DIR/reached and waits there until DIR/go exists, so that
// the suite injects its fault while the rank is in the phase rather than at
// a guessed moment.
const holdEnv = "FULGUR_CHAOS_HOLD"

// result is the JSON line rank 0 prints.
type result struct {
	SHA256     string `json:"weights_sha256"`
	GlobalStep int    `json:"global_step"`
	WorldSize  int    `json:"world_size"`
}

type hold struct {
	phase, dir string
	rank       int
	mu         sync.Mutex
	done       bool
}

// holds are the holds holdEnv asks for, ";"-separated (a second one holds
// another rank elsewhere at the same time).
type holds []*hold

func parseHold() holds {
	var hs holds
	for _, v := range strings.Split(os.Getenv(holdEnv), ";") {
		var h hold
		var rank string
		if n, _ := fmt.Sscanf(v, "%s %s %s", &h.phase, &rank, &h.dir); n != 3 {
			continue
		}
		h.rank, _ = strconv.Atoi(rank)
		hs = append(hs, &h)
	}
	return hs
}

func (hs holds) has(phase string) bool {
	for _, h := range hs {
		if h.phase == phase {
			return true
		}
	}
	return false
}

func (hs holds) at(phase string) {
	for _, h := range hs {
		h.at(phase)
	}
}

// at blocks the calling rank in phase until the suite lets it go.
func (h *hold) at(phase string) {
	if h.phase != phase {
		return
	}
	if r, _ := strconv.Atoi(os.Getenv("RANK")); r != h.rank {
		return
	}
	h.mu.Lock()
	done := h.done
	h.done = true
	h.mu.Unlock()
	if done {
		return
	}
	tmp := filepath.Join(h.dir, "reached.tmp")
	os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o644)
	os.Rename(tmp, filepath.Join(h.dir, "reached"))
	for {
		if _, err := os.Stat(filepath.Join(h.dir, "go")); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling for the suite's file
	}
}

// spanPhases are the profiler spans that open phases inside a training
// step: the trainer's forward and backward, and DDP's wait for the first
// gradient bucket's all-reduce (queued on its communication goroutine at
// the end of the backward).
var spanPhases = map[string]string{"forward+backward": "forward", "wait bucket 0": "reduce"}

// holdSpans is a profiler that holds the rank when the phase's span opens
// for the 5th time (step 5, batch 4 of epoch 0).
type holdSpans struct {
	h  holds
	mu sync.Mutex
	n  map[string]int
}

func (p *holdSpans) Start(action string) profiler.Span {
	if ph, ok := spanPhases[action]; ok && p.h.has(ph) {
		p.mu.Lock()
		p.n[action]++
		n := p.n[action]
		p.mu.Unlock()
		if n == 5 {
			p.h.at(ph)
		}
	}
	return profiler.Span{}
}
func (p *holdSpans) Report(io.Writer) error { return nil }
func (p *holdSpans) Close() error           { return nil }

// holdOpt holds the rank in the optimizer step of step 5, in its first
// update: the gradient reduce has landed on this rank, the weights are
// being written.
type holdOpt struct {
	optim.Optimizer
	h     holds
	steps int
}

func (o *holdOpt) Begin() { o.steps++; o.Optimizer.Begin() }
func (o *holdOpt) Update32(p, g []float32, off int) {
	if o.steps == 5 {
		o.h.at("optimizer")
	}
	o.Optimizer.Update32(p, g, off)
}
func (o *holdOpt) Update64(p, g []float64, off int) {
	if o.steps == 5 {
		o.h.at("optimizer")
	}
	o.Optimizer.Update64(p, g, off)
}

func (m *holding) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, s, err := m.MLP.ConfigureOptimizers()
	if err != nil {
		return nil, nil, err
	}
	return &holdOpt{Optimizer: o, h: m.h}, s, nil
}

// holding is the test MLP with the phase hooks.
type holding struct {
	*strategytest.MLP
	h       holds
	syncLog bool
}

func (m *holding) TrainingStep(s *module.Step) (*G.Node, error) {
	l, err := m.MLP.TrainingStep(s)
	if err == nil && m.syncLog {
		s.Log("train_loss_synced", l, module.OnEpoch(true), module.SyncDist())
	}
	return l, err
}

// rank0EpochLog is the misuse Lightning users report deadlocks with:
// logging from the epoch-end hooks on rank 0 only.
type rank0EpochLog struct{}

func (rank0EpochLog) Name() string { return "rank0EpochLog" }
func (rank0EpochLog) OnTrainEpochEnd(ctx context.Context, s *trainer.State) error {
	if !s.IsGlobalZero {
		return nil
	}
	return s.LogMetrics(map[string]float64{"rank0_train_epoch_end": float64(s.Epoch)})
}
func (rank0EpochLog) OnValidationEnd(ctx context.Context, s *trainer.State) error {
	if !s.IsGlobalZero {
		return nil
	}
	v, _ := s.Metrics.Get("val_loss")
	return s.LogMetrics(map[string]float64{"rank0_val_end": v})
}

// bnMLP is Linear, BatchNorm1d with ReLU, Linear: a model whose every
// training forward is a collective under SyncBatchNorm.
type bnMLP struct {
	fc1, fc2 *nn.Linear
	bn       *nn.BatchNorm
}

func (m *bnMLP) Configure(b *module.Builder) error {
	m.fc1 = nn.NewLinear(b, "fc1", 6, 16)
	m.bn = nn.NewBatchNorm1d(b, "bn", 16)
	m.fc2 = nn.NewLinear(b, "fc2", 16, 2)
	return nil
}

func (m *bnMLP) loss(s *module.Step) *G.Node {
	o := m.fc2.Forward(s, m.bn.ForwardReLU(s, m.fc1.Forward(s, s.Input("x"))))
	n := s.BatchSize() * 2
	d := G.Must(G.Sub(G.Must(G.Reshape(o, []int{n})), G.Must(G.Reshape(s.Input("y"), []int{n}))))
	return G.Must(G.Mean(G.Must(G.Square(d))))
}

func (m *bnMLP) TrainingStep(s *module.Step) (*G.Node, error) {
	l := m.loss(s)
	s.Log("train_loss", l, module.OnEpoch(true))
	return l, nil
}

func (m *bnMLP) ValidationStep(s *module.Step) error {
	s.Log("val_loss", m.loss(s))
	return nil
}

func (m *holding) OnFitStart(ctx context.Context) error { m.h.at("setup"); return nil }
func (m *holding) OnFitEnd(ctx context.Context) error   { m.h.at("teardown"); return nil }

func (m *holding) OnTrainBatchStart(ctx context.Context, b *data.Batch, batchIdx int) error {
	if batchIdx == 4 {
		m.h.at("train")
	}
	return nil
}

func (m *holding) ValidationStep(s *module.Step) error {
	m.h.at("validation")
	return m.MLP.ValidationStep(s)
}

// saveHold holds the rank at the save of step 6 (last.ckpt of step 3
// exists by then); it comes before the ModelCheckpoint in the list.
type saveHold struct{ h holds }

func (c saveHold) Name() string { return "saveHold" }

// StopsAtStepEnd is false, as for the built-in callbacks the program also
// runs (ModelCheckpoint): the ranks' stop flags ride with the gradients,
// as they do for users of the everyday callbacks (trainer.StepEndStopper).
func (c saveHold) StopsAtStepEnd() bool { return false }
func (c saveHold) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.Stage == "fit" && s.GlobalStep == 6 {
		c.h.at("save")
	}
	return nil
}

// rank0Saves is the misuse: a callback that saves a checkpoint on rank 0
// only (every rank must call SaveCheckpoint).
type rank0Saves struct{}

func (rank0Saves) Name() string { return "rank0Saves" }
func (rank0Saves) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.Stage == "fit" && s.GlobalStep == 3 && s.IsGlobalZero {
		return s.SaveCheckpoint(ctx, filepath.Join(s.RootDir, "rank0-only.ckpt"))
	}
	return nil
}

func runProgram(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("program", flag.ContinueOnError)
	strat := fs.String("strategy", "ddp", "")
	devices := fs.Int("devices", 2, "")
	nodes := fs.Int("num-nodes", 1, "")
	epochs := fs.Int("epochs", 2, "")
	root := fs.String("root", "", "the trainer's root directory")
	resume := fs.String("resume", "", "checkpoint to resume from")
	misuse := fs.Bool("rank0-save", false, "a callback saves a checkpoint on rank 0 only")
	logDir := fs.String("logdir", "", "Config.LogDir")
	hidden := fs.Int("hidden", 16, "the MLP's hidden width (a wide one makes a checkpoint that takes a while to write)")
	epochLog := fs.Bool("epoch-log", false, "the module logs a SyncDist metric and a callback logs from the epoch-end hooks on rank 0 only")
	sharded := fs.Bool("sharded", false, "every rank saves only what it holds (Config.ShardedCheckpoint)")
	uneven := fs.Bool("uneven", false, "no distributed sampler: rank r trains on 96-16r examples (uneven batches per rank), a BatchNorm model with SyncBatchNorm")
	if err := fs.Parse(args); err != nil {
		return err
	}
	n := 96
	if *uneven {
		r, _ := strconv.Atoi(os.Getenv("RANK"))
		n -= 16 * r
	}
	ds, err := strategytest.Regression(n, 6, 2, 1)
	if err != nil {
		return err
	}
	train, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 4, Shuffle: true, Seed: 3})
	if err != nil {
		return err
	}
	val, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 16})
	if err != nil {
		return err
	}
	h := parseHold()
	ckpt, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{LastOnly: true, EveryNTrainSteps: 3})
	if err != nil {
		return err
	}
	cbs := []trainer.Callback{saveHold{h}, ckpt}
	if *misuse {
		cbs = append(cbs, rank0Saves{})
	}
	if *epochLog {
		cbs = append(cbs, rank0EpochLog{})
	}
	cfg := trainer.Config{MaxEpochs: *epochs, Seed: 5, Strategy: *strat, Devices: *devices, NumNodes: *nodes, ShardedCheckpoint: *sharded,
		Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: *root, LogDir: *logDir, Callbacks: cbs,
		Profiler: &holdSpans{h: h, n: map[string]int{}},
		// The "validation" phase is the validation after training: the
		// sanity check before it would build the validation graph, and
		// meet the hold in ValidationStep, first.
		DisableSanityCheck: true}
	var m module.Module = &holding{MLP: &strategytest.MLP{In: 6, Hidden: *hidden, Out: 2, Optimizer: "adam", LR: 0.01}, h: h, syncLog: *epochLog}
	if *uneven {
		cfg.UseDistributedSampler, cfg.SyncBatchNorm = trainer.Bool(false), true
		m = &bnMLP{}
	}
	tr, err := trainer.New(cfg)
	if err != nil {
		return err
	}
	var opts []trainer.FitOption
	if *resume != "" {
		opts = append(opts, trainer.FromCheckpoint(*resume))
	}
	if err := tr.Fit(ctx, m, train, val, opts...); err != nil {
		// As the README asks of every program: Teardown on every rank,
		// failed or not (rank 0 waits for its local ranks, at most
		// FULGUR_TIMEOUT, and stops those still running).
		if terr := tr.Teardown(ctx); terr != nil {
			return fmt.Errorf("%w (teardown: %s)", err, strings.ReplaceAll(terr.Error(), "\n", "; "))
		}
		return err
	}
	if tr.IsWorker() {
		return fmt.Errorf("a ddp_spawn worker returned from Fit")
	}
	// Every rank: under fsdp, which holds no whole Store, the hash gathers
	// the shards onto rank 0.
	sha, err := tr.WeightsSHA256(ctx)
	if err != nil {
		return err
	}
	zero, st := tr.IsGlobalZero(), tr.Stats()
	if err := tr.Teardown(ctx); err != nil {
		return err
	}
	if !zero {
		return nil
	}
	return json.NewEncoder(stdout).Encode(result{SHA256: sha, GlobalStep: st.GlobalStep, WorldSize: st.WorldSize})
}
