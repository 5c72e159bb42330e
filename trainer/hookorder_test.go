package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/trainer"
)

// hookLog is what one rank's callback and module record, in call order:
// a callback's hook by its name (with " (sanity check)" while
// State.SanityChecking), a module's as "module." and its name. fail names
// the hook (as recorded) that returns errBoom, or, as "panic " and the
// name, the one that panics.
type hookLog struct {
	calls []string
	fail  string
}

var errBoom = errors.New("boom")

func (l *hookLog) add(name string) error {
	l.calls = append(l.calls, name)
	if name == l.fail {
		return errBoom
	}
	if "panic "+name == l.fail {
		var hooks map[string]*int
		*hooks[name]++ // nil pointer dereference
	}
	return nil
}

// hookRec is a callback with every hook.
type hookRec struct {
	log *hookLog
	// excs are the errors OnException was given.
	excs []error
	// batch is the next batch of the evaluation loop running.
	batch int
}

// evalBatch checks that State.BatchIdx is the evaluation loop's batch.
func (r *hookRec) evalBatch(name string, s *trainer.State, end bool) error {
	if s.BatchIdx != r.batch {
		return fmt.Errorf("%s: State.BatchIdx %d, want %d", name, s.BatchIdx, r.batch)
	}
	if end {
		r.batch++
	}
	return r.on(name, s)
}

func (*hookRec) Name() string { return "rec" }

func (r *hookRec) on(name string, s *trainer.State) error {
	if s.SanityChecking {
		name += " (sanity check)"
	}
	return r.log.add(name)
}

func (r *hookRec) OnFitStart(_ context.Context, s *trainer.State) error { return r.on("OnFitStart", s) }
func (r *hookRec) OnFitEnd(_ context.Context, s *trainer.State) error   { return r.on("OnFitEnd", s) }
func (r *hookRec) OnSanityCheckStart(_ context.Context, s *trainer.State) error {
	return r.on("OnSanityCheckStart", s)
}
func (r *hookRec) OnSanityCheckEnd(_ context.Context, s *trainer.State) error {
	return r.on("OnSanityCheckEnd", s)
}
func (r *hookRec) OnTrainStart(_ context.Context, s *trainer.State) error {
	return r.on("OnTrainStart", s)
}
func (r *hookRec) OnTrainEnd(_ context.Context, s *trainer.State) error { return r.on("OnTrainEnd", s) }
func (r *hookRec) OnTrainEpochStart(_ context.Context, s *trainer.State) error {
	return r.on("OnTrainEpochStart", s)
}
func (r *hookRec) OnTrainEpochEnd(_ context.Context, s *trainer.State) error {
	if s.BatchIdx != s.NumTrainBatches-1 {
		return fmt.Errorf("OnTrainEpochEnd: State.BatchIdx %d, want the epoch's last training batch, %d", s.BatchIdx, s.NumTrainBatches-1)
	}
	return r.on("OnTrainEpochEnd", s)
}
func (r *hookRec) OnTrainBatchStart(_ context.Context, s *trainer.State) error {
	return r.on("OnTrainBatchStart", s)
}
func (r *hookRec) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	return r.on("OnTrainBatchEnd", s)
}
func (r *hookRec) OnBeforeBackward(_ context.Context, s *trainer.State, _ float64) error {
	return r.on("OnBeforeBackward", s)
}
func (r *hookRec) OnBeforeOptimizerStep(_ context.Context, s *trainer.State) error {
	return r.on("OnBeforeOptimizerStep", s)
}
func (r *hookRec) OnAfterOptimizerStep(_ context.Context, s *trainer.State) error {
	return r.on("OnAfterOptimizerStep", s)
}
func (r *hookRec) OnValidationStart(_ context.Context, s *trainer.State) error {
	return r.on("OnValidationStart", s)
}
func (r *hookRec) OnValidationEpochStart(_ context.Context, s *trainer.State) error {
	r.batch = 0
	return r.on("OnValidationEpochStart", s)
}
func (r *hookRec) OnValidationBatchStart(_ context.Context, s *trainer.State) error {
	return r.evalBatch("OnValidationBatchStart", s, false)
}
func (r *hookRec) OnValidationBatchEnd(_ context.Context, s *trainer.State) error {
	return r.evalBatch("OnValidationBatchEnd", s, true)
}
func (r *hookRec) OnValidationEpochEnd(_ context.Context, s *trainer.State) error {
	return r.on("OnValidationEpochEnd", s)
}
func (r *hookRec) OnValidationEnd(_ context.Context, s *trainer.State) error {
	return r.on("OnValidationEnd", s)
}
func (r *hookRec) OnTestStart(_ context.Context, s *trainer.State) error {
	return r.on("OnTestStart", s)
}
func (r *hookRec) OnTestEpochStart(_ context.Context, s *trainer.State) error {
	r.batch = 0
	return r.on("OnTestEpochStart", s)
}
func (r *hookRec) OnTestBatchStart(_ context.Context, s *trainer.State) error {
	return r.evalBatch("OnTestBatchStart", s, false)
}
func (r *hookRec) OnTestBatchEnd(_ context.Context, s *trainer.State) error {
	return r.evalBatch("OnTestBatchEnd", s, true)
}
func (r *hookRec) OnTestEpochEnd(_ context.Context, s *trainer.State) error {
	return r.on("OnTestEpochEnd", s)
}
func (r *hookRec) OnTestEnd(_ context.Context, s *trainer.State) error { return r.on("OnTestEnd", s) }
func (r *hookRec) OnPredictStart(_ context.Context, s *trainer.State) error {
	return r.on("OnPredictStart", s)
}
func (r *hookRec) OnPredictEpochStart(_ context.Context, s *trainer.State) error {
	r.batch = 0
	return r.on("OnPredictEpochStart", s)
}
func (r *hookRec) OnPredictBatchStart(_ context.Context, s *trainer.State) error {
	return r.evalBatch("OnPredictBatchStart", s, false)
}
func (r *hookRec) OnPredictBatchEnd(_ context.Context, s *trainer.State, out trainer.PredictBatch) error {
	if out.Output == nil || len(out.Indices) == 0 {
		return fmt.Errorf("batch %d: no predictions handed out", s.BatchIdx)
	}
	return r.evalBatch("OnPredictBatchEnd", s, true)
}
func (r *hookRec) OnPredictEpochEnd(_ context.Context, s *trainer.State) error {
	return r.on("OnPredictEpochEnd", s)
}
func (r *hookRec) OnPredictEnd(_ context.Context, s *trainer.State) error {
	return r.on("OnPredictEnd", s)
}
func (r *hookRec) Setup(_ context.Context, s *trainer.State, stage string) error {
	if stage != s.Stage {
		return fmt.Errorf("Setup: stage %q, State.Stage %q", stage, s.Stage)
	}
	return r.on("Setup", s)
}
func (r *hookRec) Teardown(_ context.Context, s *trainer.State, stage string) error {
	if stage != s.Stage {
		return fmt.Errorf("Teardown: stage %q, State.Stage %q", stage, s.Stage)
	}
	return r.on("Teardown", s)
}
func (r *hookRec) OnAfterBackward(_ context.Context, s *trainer.State) error {
	return r.on("OnAfterBackward", s)
}
func (r *hookRec) OnBeforeZeroGrad(_ context.Context, s *trainer.State) error {
	return r.on("OnBeforeZeroGrad", s)
}
func (r *hookRec) OnException(_ context.Context, s *trainer.State, err error) error {
	r.excs = append(r.excs, err)
	return r.on("OnException", s)
}

// hookMod is linreg with a test and predict step and every module hook.
type hookMod struct {
	evalReg
	log *hookLog
}

func (m *hookMod) on(name string) error { return m.log.add("module." + name) }

func (m *hookMod) OnFitStart(context.Context) error                { return m.on("OnFitStart") }
func (m *hookMod) OnFitEnd(context.Context) error                  { return m.on("OnFitEnd") }
func (m *hookMod) OnTrainStart(context.Context) error              { return m.on("OnTrainStart") }
func (m *hookMod) OnTrainEnd(context.Context) error                { return m.on("OnTrainEnd") }
func (m *hookMod) OnTrainEpochStart(context.Context, int) error    { return m.on("OnTrainEpochStart") }
func (m *hookMod) OnTrainEpochEnd(context.Context, int) error      { return m.on("OnTrainEpochEnd") }
func (m *hookMod) OnBeforeBackward(context.Context, float64) error { return m.on("OnBeforeBackward") }
func (m *hookMod) OnBeforeOptimizerStep(context.Context, float64) error {
	return m.on("OnBeforeOptimizerStep")
}
func (m *hookMod) OnAfterOptimizerStep(context.Context, int) error {
	return m.on("OnAfterOptimizerStep")
}
func (m *hookMod) OnTrainBatchStart(context.Context, *data.Batch, int) error {
	return m.on("OnTrainBatchStart")
}
func (m *hookMod) OnTrainBatchEnd(context.Context, *data.Batch, int) error {
	return m.on("OnTrainBatchEnd")
}
func (m *hookMod) OnValidationStart(context.Context) error { return m.on("OnValidationStart") }
func (m *hookMod) OnValidationEpochStart(context.Context, int) error {
	return m.on("OnValidationEpochStart")
}
func (m *hookMod) OnValidationBatchStart(context.Context, *data.Batch, int) error {
	return m.on("OnValidationBatchStart")
}
func (m *hookMod) OnValidationBatchEnd(context.Context, *data.Batch, int) error {
	return m.on("OnValidationBatchEnd")
}
func (m *hookMod) OnValidationEpochEnd(context.Context, int) error {
	return m.on("OnValidationEpochEnd")
}
func (m *hookMod) OnValidationEnd(context.Context) error { return m.on("OnValidationEnd") }
func (m *hookMod) OnTestStart(context.Context) error     { return m.on("OnTestStart") }
func (m *hookMod) OnTestEpochStart(context.Context) error {
	return m.on("OnTestEpochStart")
}
func (m *hookMod) OnTestBatchStart(context.Context, *data.Batch, int) error {
	return m.on("OnTestBatchStart")
}
func (m *hookMod) OnTestBatchEnd(context.Context, *data.Batch, int) error {
	return m.on("OnTestBatchEnd")
}
func (m *hookMod) OnTestEpochEnd(context.Context) error { return m.on("OnTestEpochEnd") }
func (m *hookMod) OnTestEnd(context.Context) error      { return m.on("OnTestEnd") }
func (m *hookMod) OnPredictStart(context.Context) error { return m.on("OnPredictStart") }
func (m *hookMod) OnPredictEpochStart(context.Context) error {
	return m.on("OnPredictEpochStart")
}
func (m *hookMod) OnPredictBatchStart(context.Context, *data.Batch, int) error {
	return m.on("OnPredictBatchStart")
}
func (m *hookMod) OnPredictBatchEnd(context.Context, *data.Batch, int) error {
	return m.on("OnPredictBatchEnd")
}
func (m *hookMod) OnPredictEpochEnd(context.Context) error { return m.on("OnPredictEpochEnd") }
func (m *hookMod) OnPredictEnd(context.Context) error      { return m.on("OnPredictEnd") }
func (m *hookMod) Setup(_ context.Context, stage string) error {
	return m.on("Setup")
}
func (m *hookMod) Teardown(_ context.Context, stage string) error {
	return m.on("Teardown")
}
func (m *hookMod) OnAfterBackward(context.Context) error  { return m.on("OnAfterBackward") }
func (m *hookMod) OnBeforeZeroGrad(context.Context) error { return m.on("OnBeforeZeroGrad") }
func (m *hookMod) OnSaveCheckpoint(context.Context) ([]byte, error) {
	return []byte("hookMod"), m.on("OnSaveCheckpoint")
}
func (m *hookMod) OnLoadCheckpoint(_ context.Context, b []byte) error {
	if string(b) != "hookMod" {
		return fmt.Errorf("OnLoadCheckpoint given %q, want what OnSaveCheckpoint returned", b)
	}
	return m.on("OnLoadCheckpoint")
}

// lightningOrder builds the hook sequence Lightning 2.x documents, written
// out from its loops (fit_loop.py, training_epoch_loop.py,
// evaluation_loop.py, prediction_loop.py, trainer.py's sanity check): each
// hook on the callbacks first, then on the LightningModule; the sanity
// check and on_exception on the callbacks only.
type lightningOrder struct {
	calls []string
	// saves is the checkpoints written at each epoch's end (the default
	// ones: the epoch's and last.ckpt), each asking the module's
	// OnSaveCheckpoint.
	saves int
}

func (o *lightningOrder) both(hooks ...string) {
	for _, h := range hooks {
		o.calls = append(o.calls, h, "module."+h)
	}
}

// eval is a validation, test or predict loop of n batches: kind is
// "Validation", "Test" or "Predict".
func (o *lightningOrder) eval(kind string, n int, sanity bool) {
	mark := func(h string) string {
		if sanity {
			return h + " (sanity check)"
		}
		return h
	}
	both := func(h string) { o.calls = append(o.calls, mark(h), "module."+h) }
	if sanity {
		o.calls = append(o.calls, mark("OnSanityCheckStart"))
	}
	both("On" + kind + "Start")
	both("On" + kind + "EpochStart")
	for range n {
		both("On" + kind + "BatchStart")
		both("On" + kind + "BatchEnd")
	}
	both("On" + kind + "EpochEnd")
	both("On" + kind + "End")
	if sanity {
		o.calls = append(o.calls, mark("OnSanityCheckEnd"))
	}
}

// call is Trainer.Validate, Test or Predict: its setup, loop and teardown;
// load: of a checkpoint's weights (WithCheckpoint), which Lightning's
// _restore_modules_and_callbacks gives the module's on_load_checkpoint.
func (o *lightningOrder) call(kind string, n int, load bool) {
	o.both("Setup")
	if load {
		o.calls = append(o.calls, "module.OnLoadCheckpoint")
	}
	o.eval(kind, n, false)
	o.both("Teardown")
}

// fit is a Fit of epochs epochs of train batches (one optimizer step
// each), validating val batches at each epoch's end and after the batches
// in valAfter, after a sanity check of sanity batches: Lightning's
// trainer._run calls setup before on_fit_start and teardown after
// on_fit_end; its automatic optimization calls on_before_zero_grad after
// training_step, then on_before_backward, backward, on_after_backward and
// on_before_optimizer_step.
func (o *lightningOrder) fit(epochs, train, val, sanity int, valAfter ...int) {
	o.both("Setup", "OnFitStart")
	if sanity > 0 {
		o.eval("Validation", sanity, true)
	}
	o.both("OnTrainStart")
	for range epochs {
		o.both("OnTrainEpochStart")
		for b := range train {
			o.both("OnTrainBatchStart", "OnBeforeZeroGrad", "OnBeforeBackward", "OnAfterBackward", "OnBeforeOptimizerStep", "OnAfterOptimizerStep", "OnTrainBatchEnd")
			if slices.Contains(valAfter, b) {
				o.eval("Validation", val, false)
			}
		}
		o.eval("Validation", val, false)
		o.both("OnTrainEpochEnd")
		for range o.saves {
			o.calls = append(o.calls, "module.OnSaveCheckpoint")
		}
	}
	o.both("OnTrainEnd", "OnFitEnd", "Teardown")
}

// hookStrategies are the strategies hooks are checked under, each run in
// this process: ranks are goroutines over inproc collectives.
// ddp_spawn's workers are ddp ranks that run Fit through RunFit (as its
// workers do) and then exit, so only their Fit is checked.
var hookStrategies = []struct {
	name    string
	ranks   int
	fitOnly bool
	cfg     func(*trainer.Config) // for strategies chosen by name
	strat   func(t *testing.T, r int, g collective.Collective) strategy.Strategy
}{
	{name: "single", ranks: 1},
	{name: "dp", ranks: 1, cfg: func(c *trainer.Config) { c.Strategy, c.Devices = "dp", 2 }},
	{name: "ddp", ranks: 2, strat: func(t *testing.T, r int, g collective.Collective) strategy.Strategy {
		return ddpRank(t)(r, g)
	}},
	{name: "ddp_spawn", ranks: 2, fitOnly: true, strat: func(t *testing.T, r int, g collective.Collective) strategy.Strategy {
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: g})
		if err != nil {
			t.Fatal(err)
		}
		return spawnedRank{d}
	}},
	{name: "sharded", ranks: 2, strat: func(t *testing.T, r int, g collective.Collective) strategy.Strategy {
		s, err := sharded.New(sharded.Config{Group: g, Stage: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{name: "fsdp", ranks: 2, strat: func(t *testing.T, r int, g collective.Collective) strategy.Strategy {
		s, err := fsdp.New(fsdp.Config{Group: g})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// spawnedRank is a ddp_spawn worker's strategy in this process: DDP whose
// RunFit trains here and hands the result on.
type spawnedRank struct{ *ddp.DDP }

func (s spawnedRank) RunFit(ctx context.Context, fit func(context.Context) (strategy.FitResult, error)) (strategy.FitResult, bool, error) {
	r, err := fit(ctx)
	return r, false, err
}

// onHookRanks runs f on every rank of strategy sc, each with its own hook
// log, callback and module, and returns the logs and the ranks' errors.
func onHookRanks(t *testing.T, sc int, cfg trainer.Config, fail string, f func(tr *trainer.Trainer, m *hookMod) error) ([]*hookLog, []*hookRec, []error) {
	t.Helper()
	s := hookStrategies[sc]
	logs := make([]*hookLog, s.ranks)
	recs := make([]*hookRec, s.ranks)
	mods := make([]*hookMod, s.ranks)
	for r := range s.ranks {
		logs[r] = &hookLog{fail: fail}
		recs[r] = &hookRec{log: logs[r]}
		mods[r] = &hookMod{evalReg: *newEvalReg(), log: logs[r]}
	}
	mkCfg := func(r int) trainer.Config {
		c := quiet(cfg)
		c.Callbacks = []trainer.Callback{recs[r]}
		if s.cfg != nil {
			s.cfg(&c)
		}
		return c
	}
	run := func(r int, tr *trainer.Trainer) error {
		err := f(tr, mods[r])
		if terr := tr.Teardown(context.Background()); terr != nil && err == nil {
			err = terr
		}
		return err
	}
	if s.strat == nil {
		tr, err := trainer.New(mkCfg(0))
		if err != nil {
			t.Fatal(err)
		}
		return logs, recs, []error{run(0, tr)}
	}
	_, errs := onRanks(t, s.ranks, func(r int, g collective.Collective) strategy.Strategy { return s.strat(t, r, g) }, mkCfg, run)
	return logs, recs, errs
}

// TestHookOrderIsLightnings: under every strategy, on every rank, Fit
// (with its sanity check, a validation inside an epoch and the default
// checkpoints), Validate (of last.ckpt's weights), Test and Predict call
// every hook of the callbacks and of the module in the order Lightning 2.x
// documents.
func TestHookOrderIsLightnings(t *testing.T) {
	train := regression(t, 16, 0.1, 1) // 8 batches of 2: 8 per rank on one, 4 on two
	val := regression(t, 8, 0.1, 2)    // 4 batches: 4 or 2 per rank
	for sc, s := range hookStrategies {
		t.Run(s.name, func(t *testing.T) {
			nb := 8 / s.ranks
			nv := 4 / s.ranks
			cfg := trainer.Config{MaxEpochs: 2, Seed: 1, NumSanityValSteps: 1, ValCheckInterval: 2, LogEveryNSteps: 1, DefaultRootDir: t.TempDir()}
			logs, _, errs := onHookRanks(t, sc, cfg, "", func(tr *trainer.Trainer, m *hookMod) error {
				ctx := context.Background()
				if err := tr.Fit(ctx, m, loader(t, train, 2, false, false), loader(t, val, 2, false, false)); err != nil {
					return fmt.Errorf("Fit: %w", err)
				}
				if s.fitOnly {
					return nil
				}
				if _, err := tr.Validate(ctx, m, loader(t, val, 2, false, false), trainer.WithCheckpoint("last")); err != nil {
					return fmt.Errorf("Validate: %w", err)
				}
				if _, err := tr.Test(ctx, m, loader(t, val, 2, false, false)); err != nil {
					return fmt.Errorf("Test: %w", err)
				}
				if _, err := tr.Predict(ctx, m, loader(t, val, 2, false, false)); err != nil {
					return fmt.Errorf("Predict: %w", err)
				}
				return nil
			})
			want := lightningOrder{saves: 2}
			// ValCheckInterval 2: after batches 1, 3, 5 (not after the
			// last, where the epoch-end validation runs).
			var mid []int
			for b := 1; b < nb-1; b += 2 {
				mid = append(mid, b)
			}
			want.fit(2, nb, nv, 1, mid...)
			if !s.fitOnly {
				want.call("Validation", nv, true)
				want.call("Test", nv, false)
				want.call("Predict", nv, false)
			}
			for r := range errs {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				if diff := firstDiff(logs[r].calls, want.calls); diff != "" {
					t.Errorf("rank %d: %s", r, diff)
				}
			}
		})
	}
}

// firstDiff describes where got departs from want, or returns "".
func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("call %d is %q, want %q (Lightning's order); before it: %v", i, got[i], want[i], got[max(0, i-6):i])
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d calls, want %d (Lightning's order); got ends %v, want ends %v", len(got), len(want), got[max(0, len(got)-6):], want[max(0, len(want)-6):])
	}
	return ""
}

// TestHookErrorsNameTheHook: an error from any hook of a callback or of
// the module ends the call at once with an error naming the hook; the
// exception hooks then run, once, with that error, and nothing after.
func TestHookErrorsNameTheHook(t *testing.T) {
	train := regression(t, 8, 0.1, 1)
	val := regression(t, 4, 0.1, 2)
	fit := func(withVal bool) func(tr *trainer.Trainer, m *hookMod) error {
		return func(tr *trainer.Trainer, m *hookMod) error {
			var v *data.Loader
			if withVal {
				v = loader(t, val, 2, false, false)
			}
			return tr.Fit(context.Background(), m, loader(t, train, 2, false, false), v)
		}
	}
	validate := func(tr *trainer.Trainer, m *hookMod) error {
		_, err := tr.Validate(context.Background(), m, loader(t, val, 2, false, false))
		return err
	}
	test := func(tr *trainer.Trainer, m *hookMod) error {
		_, err := tr.Test(context.Background(), m, loader(t, val, 2, false, false))
		return err
	}
	predict := func(tr *trainer.Trainer, m *hookMod) error {
		_, err := tr.Predict(context.Background(), m, loader(t, val, 2, false, false))
		return err
	}
	predictEach := func(tr *trainer.Trainer, m *hookMod) error {
		return tr.PredictEach(context.Background(), m, loader(t, val, 2, false, false), func(trainer.PredictBatch) error { return nil })
	}
	calls := map[string]func(tr *trainer.Trainer, m *hookMod) error{
		"OnFitStart": fit(false), "OnTrainStart": fit(false), "OnTrainEpochStart": fit(false), "OnTrainBatchStart": fit(false),
		"OnTrainBatchEnd": fit(false), "OnTrainEpochEnd": fit(false), "OnTrainEnd": fit(false), "OnFitEnd": fit(false),
		"OnBeforeBackward": fit(false), "OnBeforeOptimizerStep": fit(false), "OnAfterOptimizerStep": fit(false),
		"Setup": fit(false), "Teardown": fit(false), "OnAfterBackward": fit(false), "OnBeforeZeroGrad": fit(false),
		"OnSanityCheckStart": fit(true), "OnSanityCheckEnd": fit(true),
		"OnValidationStart": validate, "OnValidationEpochStart": validate, "OnValidationBatchStart": validate,
		"OnValidationBatchEnd": validate, "OnValidationEpochEnd": validate, "OnValidationEnd": validate,
		"OnTestStart": test, "OnTestEpochStart": test, "OnTestBatchStart": test, "OnTestBatchEnd": test,
		"OnTestEpochEnd": test, "OnTestEnd": test,
		"OnPredictStart": predict, "OnPredictEpochStart": predict, "OnPredictBatchStart": predict,
		"OnPredictBatchEnd": predictEach, "OnPredictEpochEnd": predict, "OnPredictEnd": predict,
	}
	callbackOnly := map[string]bool{"OnSanityCheckStart": true, "OnSanityCheckEnd": true}
	for hook, call := range calls {
		for _, owner := range []string{"callbacks/rec.", "module."} {
			if owner == "module." && callbackOnly[hook] {
				continue
			}
			fail := hook
			switch {
			case owner == "module.":
				fail = "module." + hook
			case callbackOnly[hook]:
				fail = hook + " (sanity check)"
			}
			t.Run(owner+hook, func(t *testing.T) {
				logs, recs, errs := onHookRanks(t, 0, trainer.Config{MaxEpochs: 2, Seed: 1}, fail, call)
				err, log, rec := errs[0], logs[0].calls, recs[0]
				if err == nil || !strings.Contains(err.Error(), owner+hook+": boom") || !errors.Is(err, errBoom) {
					t.Fatalf("the call returned %v, want an error naming %s", err, owner+hook)
				}
				if n := len(log); n < 2 || log[n-2] != fail || log[n-1] != "OnException" {
					t.Errorf("the calls end %v, want %q and then OnException only", log[max(0, n-4):], fail)
				}
				if len(rec.excs) != 1 || rec.excs[0] != err {
					t.Errorf("OnException was given %v, want the call's error once", rec.excs)
				}
			})
		}
	}
}

// failingExc is a callback whose OnException fails.
type failingExc struct{ seen int }

func (*failingExc) Name() string { return "exc" }
func (f *failingExc) OnException(ctx context.Context, s *trainer.State, err error) error {
	f.seen++
	if ctx.Err() != nil {
		return fmt.Errorf("given a cancelled context: %w", ctx.Err())
	}
	if err := s.SaveCheckpoint(ctx, "x.ckpt"); err == nil {
		return errors.New("a checkpoint could be saved")
	}
	if _, err := s.Rank0Value(ctx, 1); err == nil {
		return errors.New("Rank0Value could be called")
	}
	return errors.New("no luck")
}

// TestExceptionHook: OnException's own error joins the call's, which
// stays first and matchable; it gets a context that is neither cancelled
// nor nil, and may neither save a checkpoint nor call Rank0Value. A Stop is no
// exception, and a call that succeeds runs no exception hook.
func TestExceptionHook(t *testing.T) {
	train := regression(t, 8, 0.1, 1)
	exc := &failingExc{}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 1, DefaultRootDir: t.TempDir(), Callbacks: []trainer.Callback{exc}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = tr.Fit(ctx, &linreg{in: 4, lr: 0.05}, loader(t, train, 2, false, false), nil)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "callbacks/exc.OnException: no luck") || exc.seen != 1 {
		t.Fatalf("Fit with a cancelled context: %v (OnException called %d times); want the cancellation joined with OnException's error", err, exc.seen)
	}
	if first := strings.SplitN(err.Error(), "\n", 2)[0]; strings.Contains(first, "OnException") {
		t.Errorf("the error starts with the hook's, not the call's: %q", first)
	}

	var nilCtx context.Context
	_, err = tr.Validate(nilCtx, &linreg{in: 4, lr: 0.05}, loader(t, train, 2, false, false))
	if err == nil || !strings.Contains(err.Error(), "context is nil") || !strings.Contains(err.Error(), "callbacks/exc.OnException: no luck") || exc.seen != 2 {
		t.Errorf("Validate with a nil context: %v (OnException called %d times)", err, exc.seen)
	}

	_, err = tr.Test(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, train, 2, false, false))
	if err == nil || !strings.Contains(err.Error(), "no TestStep") || !strings.Contains(err.Error(), "callbacks/exc.OnException: no luck") || exc.seen != 3 {
		t.Errorf("Test of a module without TestStep: %v (OnException called %d times)", err, exc.seen)
	}

	stop := &stepSpy{t: t, stopAfter: 2}
	tr, err = trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 1, Callbacks: []trainer.Callback{stop, exc}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, train, 2, false, false), nil); err != nil || exc.seen != 3 {
		t.Errorf("Fit stopped by a hook: %v, OnException called %d times in all; want nil and no new call", err, exc.seen)
	}
}

// TestCallbackHooksWithoutModuleHooks: a module with no hook of its own
// leaves the callbacks' hooks, per batch too, called as Lightning calls
// them.
func TestCallbackHooksWithoutModuleHooks(t *testing.T) {
	train := regression(t, 8, 0.1, 1)
	val := regression(t, 4, 0.1, 2)
	log := &hookLog{}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 1, NumSanityValSteps: 1, Callbacks: []trainer.Callback{&hookRec{log: log}}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, m := context.Background(), newEvalReg()
	if err := tr.Fit(ctx, m, loader(t, train, 2, false, false), loader(t, val, 2, false, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Test(ctx, m, loader(t, val, 2, false, false)); err != nil {
		t.Fatal(err)
	}
	if err := tr.PredictEach(ctx, m, loader(t, val, 2, false, false), func(trainer.PredictBatch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var want lightningOrder
	want.fit(1, 4, 2, 1)
	want.call("Test", 2, false)
	want.call("Predict", 2, false)
	cbOnly := slices.DeleteFunc(want.calls, func(c string) bool { return strings.HasPrefix(c, "module.") })
	// linreg's own OnTrainEpochEnd is a module hook, and not recorded.
	if diff := firstDiff(log.calls, cbOnly); diff != "" {
		t.Error(diff)
	}
}

// stopAtBatchStart asks, on rank 0 only, to stop before the batch that
// would take optimizer step at+1.
type stopAtBatchStart struct{ at int }

func (stopAtBatchStart) Name() string { return "stopper" }
func (s stopAtBatchStart) OnTrainBatchStart(ctx context.Context, st *trainer.State) error {
	if st.IsGlobalZero && st.GlobalStep == s.at {
		return trainer.Stop("asked before step %d", s.at+1)
	}
	return nil
}

// TestStopFromTrainBatchStart: a Stop asked in OnTrainBatchStart, on one
// rank, lets the batch run and stops every rank at its end.
func TestStopFromTrainBatchStart(t *testing.T) {
	train := regression(t, 32, 0.1, 1) // 8 steps an epoch per rank
	trs, errs := onRanks(t, 2, ddpRank(t), func(int) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 2, Seed: 1, Callbacks: []trainer.Callback{stopAtBatchStart{at: 2}}})
	}, func(_ int, tr *trainer.Trainer) error {
		return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, train, 2, false, false), nil)
	})
	for r, tr := range trs {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		want := "asked before step 3" // rank 0 says why; the others that it stopped
		if r > 0 {
			want = "another rank stopped training"
		}
		if s := tr.Stats(); s.GlobalStep != 3 || !strings.Contains(s.StoppedEarly, want) {
			t.Errorf("rank %d: stopped at global step %d (%q); want 3, and %q", r, s.GlobalStep, s.StoppedEarly, want)
		}
	}
}

// finalizeLog is a Logger that records its Finalize in a shared log.
type finalizeLog struct{ log *[]string }

func (finalizeLog) Name() string                             { return "finalizeLog" }
func (finalizeLog) LogHyperparams(map[string]any) error      { return nil }
func (finalizeLog) LogMetrics(int, map[string]float64) error { return nil }
func (l finalizeLog) Finalize(status string) error {
	*l.log = append(*l.log, "Finalize "+status)
	return nil
}

// excLog records OnException in a shared log and fails OnTrainEpochEnd.
type excLog struct{ log *[]string }

func (excLog) Name() string { return "excLog" }
func (excLog) OnTrainEpochEnd(context.Context, *trainer.State) error {
	return errors.New("epoch end refused")
}
func (e excLog) OnException(ctx context.Context, s *trainer.State, err error) error {
	*e.log = append(*e.log, "OnException")
	return nil
}

// TestExceptionHookBeforeLoggersFinalize: as Lightning's, a failed Fit
// calls OnException before its loggers are finalized as "failed".
func TestExceptionHookBeforeLoggersFinalize(t *testing.T) {
	var log []string
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 1, DefaultRootDir: t.TempDir(), Loggers: []trainer.Logger{finalizeLog{&log}}, Callbacks: []trainer.Callback{excLog{&log}}}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, regression(t, 8, 0.1, 1), 4, false, false), nil)
	if err == nil || !strings.Contains(err.Error(), "callbacks/excLog.OnTrainEpochEnd: epoch end refused") {
		t.Fatalf("Fit: %v", err)
	}
	if want := []string{"OnException", "Finalize failed"}; !slices.Equal(log, want) {
		t.Errorf("calls %v, want %v", log, want)
	}
}

// stopInValidation asks, on rank 0 only, to stop in the first batch of
// the Fit's first validation (not the sanity check's).
type stopInValidation struct{}

func (stopInValidation) Name() string { return "stopper" }
func (stopInValidation) OnValidationBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.IsGlobalZero && !s.SanityChecking && s.BatchIdx == 0 {
		return trainer.Stop("asked in validation at step %d", s.GlobalStep)
	}
	return nil
}

// TestStopFromValidationBatchHook: a Stop asked in a validation batch's
// hook, on one rank, lets the validation finish and ends the Fit at the
// end of that epoch on every rank.
func TestStopFromValidationBatchHook(t *testing.T) {
	train, val := regression(t, 32, 0.1, 1), regression(t, 16, 0.1, 2) // 8 steps an epoch per rank
	trs, errs := onRanks(t, 2, ddpRank(t), func(int) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 3, Seed: 1, Callbacks: []trainer.Callback{stopInValidation{}}})
	}, func(_ int, tr *trainer.Trainer) error {
		return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, train, 2, false, false), loader(t, val, 2, false, false))
	})
	for r, tr := range trs {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if s := tr.Stats(); s.GlobalStep != 8 || s.Epochs != 1 || s.StoppedEarly == "" {
			t.Errorf("rank %d: %d steps, %d epochs, stopped %q; want the first epoch's 8 steps and a stop", r, s.GlobalStep, s.Epochs, s.StoppedEarly)
		}
	}
}
