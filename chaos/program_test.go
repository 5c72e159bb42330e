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
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// programEnv makes the test binary act as the training program under test:
// the suite starts it, and ddp re-executes it for its other ranks exactly as
// it would a user's program.
const programEnv = "FULGUR_CHAOS_PROGRAM"

// holdEnv names the phase ("setup", "train", "validation", "save",
// "teardown"), the rank and a directory: when that rank reaches the phase it
// writes DIR/reached and waits there until DIR/go exists, so that the suite
// injects its fault while the rank is in the phase rather than at a guessed
// moment.
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
	done       bool
}

func parseHold() *hold {
	v := os.Getenv(holdEnv)
	if v == "" {
		return nil
	}
	var h hold
	var rank string
	if n, _ := fmt.Sscanf(v, "%s %s %s", &h.phase, &rank, &h.dir); n != 3 {
		return nil
	}
	h.rank, _ = strconv.Atoi(rank)
	return &h
}

// at blocks the calling rank in phase until the suite lets it go.
func (h *hold) at(phase string) {
	if h == nil || h.done || h.phase != phase {
		return
	}
	if r, _ := strconv.Atoi(os.Getenv("RANK")); r != h.rank {
		return
	}
	h.done = true
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

// holding is the test MLP with the phase hooks.
type holding struct {
	*strategytest.MLP
	h *hold
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
type saveHold struct{ h *hold }

func (c saveHold) Name() string { return "saveHold" }
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
	epochs := fs.Int("epochs", 2, "")
	root := fs.String("root", "", "the trainer's root directory")
	resume := fs.String("resume", "", "checkpoint to resume from")
	misuse := fs.Bool("rank0-save", false, "a callback saves a checkpoint on rank 0 only")
	logDir := fs.String("logdir", "", "Config.LogDir")
	hidden := fs.Int("hidden", 16, "the MLP's hidden width (a wide one makes a checkpoint that takes a while to write)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ds, err := strategytest.Regression(96, 6, 2, 1)
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
	tr, err := trainer.New(trainer.Config{MaxEpochs: *epochs, Seed: 5, Strategy: *strat, Devices: *devices,
		Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: *root, LogDir: *logDir, Callbacks: cbs})
	if err != nil {
		return err
	}
	m := &holding{MLP: &strategytest.MLP{In: 6, Hidden: *hidden, Out: 2, Optimizer: "adam", LR: 0.01}, h: h}
	var opts []trainer.FitOption
	if *resume != "" {
		opts = append(opts, trainer.FromCheckpoint(*resume))
	}
	if err := tr.Fit(ctx, m, train, val, opts...); err != nil {
		return err
	}
	if tr.IsWorker() {
		return fmt.Errorf("a ddp_spawn worker returned from Fit")
	}
	zero, st, sha := tr.IsGlobalZero(), tr.Stats(), tr.Store().SHA256()
	if err := tr.Teardown(ctx); err != nil {
		return err
	}
	if !zero {
		return nil
	}
	return json.NewEncoder(stdout).Encode(result{SHA256: sha, GlobalStep: st.GlobalStep, WorldSize: st.WorldSize})
}
