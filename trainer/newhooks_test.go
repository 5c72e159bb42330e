package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/panics"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/trainer"
)

// onStrategy runs f on every rank of hookStrategies[sc], each rank's
// trainer built from cfg(r), and returns the ranks' errors.
func onStrategy(t *testing.T, sc int, cfg func(r int) trainer.Config, f func(r int, tr *trainer.Trainer) error) []error {
	t.Helper()
	s := hookStrategies[sc]
	mk := func(r int) trainer.Config {
		c := quiet(cfg(r))
		if s.cfg != nil {
			s.cfg(&c)
		}
		return c
	}
	if s.strat == nil {
		tr, err := trainer.New(mk(0))
		if err != nil {
			t.Fatal(err)
		}
		return []error{f(0, tr)}
	}
	_, errs := onRanks(t, s.ranks, func(r int, g collective.Collective) strategy.Strategy { return s.strat(t, r, g) }, mk, f)
	return errs
}

// ckptMod keeps a state of its own that is no tensor (the optimizer steps
// it has seen, and its rank) in checkpoints through the module's
// checkpoint hooks.
type ckptMod struct {
	evalReg
	rank, steps int
	saves       int
	loaded      []string // what each OnLoadCheckpoint was given ("<nil>" for nil)
}

func (m *ckptMod) OnAfterOptimizerStep(_ context.Context, step int) error {
	m.steps = step
	return nil
}
func (m *ckptMod) OnSaveCheckpoint(context.Context) ([]byte, error) {
	m.saves++
	return fmt.Appendf(nil, "rank %d saw %d steps", m.rank, m.steps), nil
}
func (m *ckptMod) OnLoadCheckpoint(_ context.Context, b []byte) error {
	if b == nil {
		m.loaded = append(m.loaded, "<nil>")
	} else {
		m.loaded = append(m.loaded, string(b))
	}
	return nil
}

// TestModuleCheckpointHooks: a module's OnSaveCheckpoint runs on every
// rank at each checkpoint and rank 0's bytes are written; a Fit resumed
// from the checkpoint, and an evaluation of its weights, give them back to
// OnLoadCheckpoint on every rank, under every strategy (fsdp with sharded
// checkpoints too); a checkpoint written by a module without the hook
// gives nil.
func TestModuleCheckpointHooks(t *testing.T) {
	train := regression(t, 16, 0.1, 1) // batches of 2: 8 steps an epoch on one rank, 4 on two
	for sc, s := range hookStrategies {
		for _, sharded := range []bool{false, true} {
			if sharded && s.name != "fsdp" {
				continue
			}
			name := s.name
			if sharded {
				name += " sharded checkpoint"
			}
			t.Run(name, func(t *testing.T) {
				root := t.TempDir()
				steps := 8 / s.ranks
				mods := make([]*ckptMod, s.ranks)
				var mu sync.Mutex
				cfg := func(maxEpochs int) func(r int) trainer.Config {
					return func(r int) trainer.Config {
						mu.Lock()
						mods[r] = &ckptMod{evalReg: *newEvalReg(), rank: r}
						mu.Unlock()
						return trainer.Config{MaxEpochs: maxEpochs, Seed: 1, DefaultRootDir: root, LogDir: filepath.Join(root, "run"), ShardedCheckpoint: sharded}
					}
				}
				errs := onStrategy(t, sc, cfg(1), func(r int, tr *trainer.Trainer) error {
					return tr.Fit(context.Background(), mods[r], loader(t, train, 2, false, false), nil)
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
					// The epoch's checkpoint and last.ckpt.
					if mods[r].saves != 2 {
						t.Errorf("rank %d: OnSaveCheckpoint ran %d times, want 2", r, mods[r].saves)
					}
				}
				last := filepath.Join(root, "run", "checkpoints", "last.ckpt")
				want := fmt.Sprintf("rank 0 saw %d steps", steps)
				errs = onStrategy(t, sc, cfg(2), func(r int, tr *trainer.Trainer) error {
					if err := tr.Fit(context.Background(), mods[r], loader(t, train, 2, false, false), nil, trainer.FromCheckpoint(last)); err != nil {
						return err
					}
					if s.fitOnly {
						return nil
					}
					_, err := tr.Validate(context.Background(), mods[r], loader(t, train, 2, false, false), trainer.WithCheckpoint(last))
					return err
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
					// The resume, then (but with ddp_spawn, whose workers
					// run Fit only) the evaluation of the second epoch's
					// last.ckpt.
					wantLoaded := []string{want, fmt.Sprintf("rank 0 saw %d steps", 2*steps)}
					if s.fitOnly {
						wantLoaded = wantLoaded[:1]
					}
					if loaded := mods[r].loaded; !slices.Equal(loaded, wantLoaded) {
						t.Errorf("rank %d: OnLoadCheckpoint given %q; want %q", r, loaded, wantLoaded)
					}
				}
			})
		}
	}
	t.Run("a checkpoint without the module's entry", func(t *testing.T) {
		root := t.TempDir()
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 1, DefaultRootDir: root}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), newEvalReg(), loader(t, train, 2, false, false), nil); err != nil {
			t.Fatal(err)
		}
		m := &ckptMod{evalReg: *newEvalReg()}
		tr, err = trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 1, DefaultRootDir: root}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), m, loader(t, train, 2, false, false), nil, trainer.FromCheckpoint("last")); err != nil {
			t.Fatal(err)
		}
		if len(m.loaded) != 1 || m.loaded[0] != "<nil>" {
			t.Errorf("OnLoadCheckpoint given %q, want nil once", m.loaded)
		}
	})
}

// TestNewHookPanicsAreErrors: a panic in Setup, Teardown, OnAfterBackward
// or OnBeforeZeroGrad of a callback or the module, or in the module's
// OnSaveCheckpoint or OnLoadCheckpoint, is an error of the call naming
// the hook, with the user's line, on every rank; the exception hooks run.
func TestNewHookPanicsAreErrors(t *testing.T) {
	train := regression(t, 8, 0.1, 1)
	for _, hook := range []string{"Setup", "Teardown", "OnAfterBackward", "OnBeforeZeroGrad", "module.Setup", "module.Teardown",
		"module.OnAfterBackward", "module.OnBeforeZeroGrad", "module.OnSaveCheckpoint", "module.OnLoadCheckpoint"} {
		for sc, s := range hookStrategies {
			if s.name != "single" && s.name != "ddp" {
				continue
			}
			t.Run(hook+"/"+s.name, func(t *testing.T) {
				root := t.TempDir()
				cfg := trainer.Config{MaxEpochs: 1, Seed: 1, DefaultRootDir: root}
				_, recs, errs := onHookRanks(t, sc, cfg, "panic "+hook, func(tr *trainer.Trainer, m *hookMod) error {
					err := tr.Fit(context.Background(), m, loader(t, train, 2, false, false), nil)
					if hook != "module.OnLoadCheckpoint" || err != nil {
						return err
					}
					return tr.Fit(context.Background(), m, loader(t, train, 2, false, false), nil, trainer.FromCheckpoint("last"))
				})
				owner := "callbacks/rec." + hook
				if strings.HasPrefix(hook, "module.") {
					owner = hook
				}
				for r, err := range errs {
					errSays(t, hook, err, []string{owner + ": ", "nil pointer dereference", "hookorder_test.go"})
					var pe *panics.Error
					if err != nil && !errors.As(err, &pe) {
						t.Errorf("rank %d: %v carries no panic", r, err)
					}
					if len(recs[r].excs) != 1 {
						t.Errorf("rank %d: OnException ran %d times, want once", r, len(recs[r].excs))
					}
				}
			})
		}
	}
}

// gradSpy records, at each OnAfterBackward, the batch and the gradient of
// w, and counts OnBeforeZeroGrad by batch; it checks that no optimizer
// step has changed w since the window's first batch.
type gradSpy struct {
	grads    map[int][]float32 // batch -> w's gradient
	zeroAt   []int             // the batches of OnBeforeZeroGrad
	atWindow string            // w's SHA-256 of the window's start
}

func (*gradSpy) Name() string { return "gradSpy" }
func (g *gradSpy) OnBeforeZeroGrad(_ context.Context, s *trainer.State) error {
	g.zeroAt = append(g.zeroAt, s.BatchIdx)
	g.atWindow = s.Weights.SHA256()
	return nil
}
func (g *gradSpy) OnAfterBackward(_ context.Context, s *trainer.State) error {
	if h := s.Weights.SHA256(); h != g.atWindow {
		return fmt.Errorf("batch %d: the weights changed since the window's first batch: an update came before OnAfterBackward", s.BatchIdx)
	}
	gw, err := s.Weights.GradTensor("w")
	if err != nil {
		return err
	}
	if g.grads == nil {
		g.grads = map[int][]float32{}
	}
	g.grads[s.BatchIdx] = slices.Clone(gw.Data().([]float32))
	return nil
}

// TestAfterBackwardGradients: under ddp with two batches a step,
// OnBeforeZeroGrad runs once a step, at the window's first batch, and
// OnAfterBackward after every batch, before the update: inside the window
// it sees each rank's own accumulated gradients (they differ), at the
// window's last batch the gradients reduced across ranks (the same on
// both), with no update before.
func TestAfterBackwardGradients(t *testing.T) {
	train := regression(t, 16, 0.1, 1) // 4 batches of 2 per rank: steps after batches 1 and 3
	spies := []*gradSpy{{}, {}}
	errs := onStrategy(t, 2 /* ddp */, func(r int) trainer.Config {
		return trainer.Config{MaxEpochs: 1, Seed: 1, AccumulateGradBatches: 2, Callbacks: []trainer.Callback{spies[r]}}
	}, func(r int, tr *trainer.Trainer) error {
		return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, train, 2, false, false), nil)
	})
	if hookStrategies[2].name != "ddp" {
		t.Fatalf("hookStrategies[2] is %s, not ddp", hookStrategies[2].name)
	}
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if !slices.Equal(spies[r].zeroAt, []int{0, 2}) {
			t.Errorf("rank %d: OnBeforeZeroGrad at batches %v, want 0 and 2 (each step's first)", r, spies[r].zeroAt)
		}
		if len(spies[r].grads) != 4 {
			t.Fatalf("rank %d: OnAfterBackward at %d batches, want 4", r, len(spies[r].grads))
		}
	}
	a, b := spies[0].grads, spies[1].grads
	for _, bi := range []int{0, 2} {
		if slices.Equal(a[bi], b[bi]) {
			t.Errorf("batch %d, inside a window: the ranks' gradients are the same %v; want each its own", bi, a[bi])
		}
	}
	for _, bi := range []int{1, 3} {
		if !slices.Equal(a[bi], b[bi]) {
			t.Errorf("batch %d, a window's last: rank 0's gradient %v, rank 1's %v; want them reduced, the same", bi, a[bi], b[bi])
		}
	}
}
