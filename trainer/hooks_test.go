package trainer_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/trainer"
)

// gradNormOf is the L2 norm of the gradients State.Weights holds now,
// computed from the tensors.
func gradNormOf(t testing.TB, w trainer.Weights) float64 {
	ss := 0.0
	for _, e := range w.Entries() {
		if e.Buffer {
			continue
		}
		g, err := w.GradTensor(e.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range g.Data().([]float32) {
			ss += float64(v) * float64(v)
		}
	}
	return math.Sqrt(ss)
}

// stepSpy records the per-step hooks in order.
type stepSpy struct {
	t         testing.TB
	events    []string
	losses    []float64
	norms     []float64 // State.GradNorm in OnBeforeOptimizerStep
	own       []float64 // the norm of the gradients read there
	failAt    int       // OnBeforeOptimizerStep fails at this global step (0: never)
	noGrads   bool      // the strategy keeps no gradient buffer: own stays empty
	stopAfter int       // OnAfterOptimizerStep stops at this global step (0: never)
}

func (*stepSpy) Name() string { return "spy" }
func (s *stepSpy) OnBeforeBackward(ctx context.Context, st *trainer.State, loss float64) error {
	s.events = append(s.events, fmt.Sprintf("backward@%d", st.GlobalStep))
	s.losses = append(s.losses, loss)
	return nil
}
func (s *stepSpy) OnBeforeOptimizerStep(ctx context.Context, st *trainer.State) error {
	s.events = append(s.events, fmt.Sprintf("before@%d", st.GlobalStep))
	s.norms = append(s.norms, st.GradNorm)
	if !s.noGrads {
		s.own = append(s.own, gradNormOf(s.t, st.Weights))
	}
	if s.failAt > 0 && st.GlobalStep+1 == s.failAt {
		return errors.New("boom")
	}
	return nil
}
func (s *stepSpy) OnAfterOptimizerStep(ctx context.Context, st *trainer.State) error {
	s.events = append(s.events, fmt.Sprintf("after@%d", st.GlobalStep))
	if st.GlobalStep == s.stopAfter {
		return trainer.Stop("enough at step %d", st.GlobalStep)
	}
	return nil
}

// hookedReg is linreg with the module's per-step hooks.
type hookedReg struct {
	linreg
	events []string
}

func (m *hookedReg) OnBeforeBackward(ctx context.Context, loss float64) error {
	m.events = append(m.events, "module.backward")
	return nil
}
func (m *hookedReg) OnBeforeOptimizerStep(ctx context.Context, gradNorm float64) error {
	m.events = append(m.events, fmt.Sprintf("module.before %.6g", gradNorm))
	return nil
}
func (m *hookedReg) OnAfterOptimizerStep(ctx context.Context, step int) error {
	m.events = append(m.events, fmt.Sprintf("module.after@%d", step))
	return nil
}

// TestStepHooks: before backward for every micro-batch with its loss;
// before the optimizer step once per accumulation window, with the
// gradients of the window and their norm; after it with the step counted;
// each in a profiler span named after it.
func TestStepHooks(t *testing.T) {
	ds := regression(t, 64, 0.01, 1) // 4 batches of 16
	spy := &stepSpy{t: t}
	m := &hookedReg{linreg: linreg{in: 4, lr: 0.05}}
	var out bytes.Buffer
	cfg := quiet(trainer.Config{MaxEpochs: 1, Seed: 1, AccumulateGradBatches: 2, GradientClipVal: 1e-3,
		Profiler: profiler.NewSimple(), Callbacks: []trainer.Callback{spy}})
	cfg.Out = &out
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	want := "backward@0 backward@0 before@0 after@1 backward@1 backward@1 before@1 after@2"
	if got := strings.Join(spy.events, " "); got != want {
		t.Errorf("hooks ran as\n %s\nwant\n %s", got, want)
	}
	if len(spy.losses) != 4 || spy.losses[3] != tr.Stats().LastTrainLoss {
		t.Errorf("losses %v; the last batch's is %v", spy.losses, tr.Stats().LastTrainLoss)
	}
	for i, n := range spy.norms {
		// Clipping to 1e-3 comes after the hook: the norm is the raw one.
		if !(n > 1e-3) || math.Abs(n-spy.own[i]) > 1e-6*n {
			t.Errorf("step %d: GradNorm %v, the gradients' norm %v", i, n, spy.own[i])
		}
	}
	if len(m.events) != 8 || m.events[0] != "module.backward" || m.events[2] != fmt.Sprintf("module.before %.6g", spy.norms[0]) || m.events[3] != "module.after@1" {
		t.Errorf("module hooks: %v", m.events)
	}
	for _, span := range []string{"callbacks/spy.OnBeforeBackward", "callbacks/spy.OnBeforeOptimizerStep", "callbacks/spy.OnAfterOptimizerStep", "module.OnBeforeOptimizerStep"} {
		if !strings.Contains(out.String(), span) {
			t.Errorf("the profiler report has no span %q:\n%s", span, out.String())
		}
	}
}

// TestStepHookErrorsAndStops: an error from OnBeforeOptimizerStep fails
// Fit, named after the hook, before the update; a Stop from
// OnAfterOptimizerStep ends training after that step.
func TestStepHookErrorsAndStops(t *testing.T) {
	ds := regression(t, 64, 0.01, 1)
	run := func(spy *stepSpy) (*trainer.Trainer, error) {
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 3, Seed: 1, Callbacks: []trainer.Callback{spy}}))
		if err != nil {
			t.Fatal(err)
		}
		return tr, tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil)
	}
	tr, err := run(&stepSpy{t: t, failAt: 3})
	if err == nil || !strings.Contains(err.Error(), "callbacks/spy.OnBeforeOptimizerStep: boom") || !strings.Contains(err.Error(), "optimizer step") {
		t.Errorf("Fit: %v", err)
	}
	if s := tr.Stats().GlobalStep; s != 2 {
		t.Errorf("global step %d after a failed third step, want 2", s)
	}
	tr, err = run(&stepSpy{t: t, stopAfter: 5})
	if err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 5 || !strings.Contains(s.StoppedEarly, "enough at step 5") {
		t.Errorf("global step %d, stopped %q; want 5 and the hook's reason", s.GlobalStep, s.StoppedEarly)
	}
}

// TestBeforeOptimizerStepSeesReducedGradients: under ddp and sharded (two
// ranks, each its half of the batch) every rank's hook sees the same
// gradient norm, the norm of the reduced gradients; ddp's store holds them.
func TestBeforeOptimizerStepSeesReducedGradients(t *testing.T) {
	ds := regression(t, 64, 0.01, 1)
	norms := map[string][][]float64{}
	for _, name := range []string{"ddp", "sharded"} {
		group, err := inproc.NewGroup(2)
		if err != nil {
			t.Fatal(err)
		}
		spies := []*stepSpy{{t: t, noGrads: name == "sharded"}, {t: t, noGrads: name == "sharded"}}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			var s strategy.Strategy
			if name == "ddp" {
				s, err = ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
			} else {
				s, err = sharded.New(sharded.Config{Group: group[r], Stage: 2})
			}
			if err != nil {
				t.Fatal(err)
			}
			tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 1, StrategyImpl: s, HandleSignals: trainer.Bool(false), Callbacks: []trainer.Callback{spies[r]}}))
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 8, false, false), nil)
				if err := tr.Teardown(context.Background()); err != nil && errs[r] == nil {
					errs[r] = err
				}
			}()
		}
		wg.Wait()
		for r := range 2 {
			if errs[r] != nil {
				t.Fatalf("%s rank %d: %v", name, r, errs[r])
			}
		}
		if len(spies[0].norms) != 4 {
			t.Fatalf("%s: %d optimizer steps seen, want 4", name, len(spies[0].norms))
		}
		for i := range spies[0].norms {
			a, b := spies[0].norms[i], spies[1].norms[i]
			if !(a > 0) || a != b {
				t.Errorf("%s step %d: rank 0 saw GradNorm %v, rank 1 %v", name, i, a, b)
			}
			if name == "ddp" && math.Abs(a-spies[1].own[i]) > 1e-6*a {
				t.Errorf("ddp step %d: GradNorm %v, rank 1's gradients' norm %v", i, a, spies[1].own[i])
			}
		}
		norms[name] = [][]float64{spies[0].norms}
	}
	for i, a := range norms["ddp"][0] {
		if b := norms["sharded"][0][i]; math.Abs(a-b) > 1e-5*a {
			t.Errorf("step %d: ddp's gradient norm %v, sharded's %v", i, a, b)
		}
	}
}

// TestLogGradNorm: with LogGradNorm, metrics.csv has grad_norm in every
// step row: the norm of the step's gradients before clipping.
func TestLogGradNorm(t *testing.T) {
	ds := regression(t, 64, 0.01, 1)
	dir := t.TempDir()
	spy := &stepSpy{t: t}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 1, LogGradNorm: true, LogEveryNSteps: 1, GradientClipVal: 1e-3,
		LogDir: dir, DisableCheckpointing: true, Callbacks: []trainer.Callback{spy}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "metrics.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	gi, ok := col["grad_norm"]
	if !ok {
		t.Fatalf("metrics.csv has no grad_norm column: %v", rows[0])
	}
	var logged []float64
	for _, r := range rows[1:] {
		if r[col["lr"]] == "" {
			continue // an epoch row
		}
		v, err := strconv.ParseFloat(r[gi], 64)
		if err != nil {
			t.Fatalf("grad_norm %q in row %v: %v", r[gi], r, err)
		}
		logged = append(logged, v)
	}
	if len(logged) != 8 || len(spy.own) != 8 {
		t.Fatalf("%d step rows with grad_norm and %d steps, want 8", len(logged), len(spy.own))
	}
	for i, v := range logged {
		if !(v > 1e-3) || math.Abs(v-spy.own[i]) > 1e-5*v {
			t.Errorf("step %d: grad_norm %v logged, the gradients' norm is %v", i+1, v, spy.own[i])
		}
	}
	if v, ok := tr.Metrics()["grad_norm"]; !ok || v != spy.norms[7] {
		t.Errorf("Metrics()[grad_norm] = %v, %v; want the last step's %v", v, ok, spy.norms[7])
	}
}

// midStepSaver tries to save a checkpoint after an optimizer step.
type midStepSaver struct{ dir string }

func (midStepSaver) Name() string { return "saver" }
func (m midStepSaver) OnAfterOptimizerStep(ctx context.Context, s *trainer.State) error {
	return s.SaveCheckpoint(ctx, filepath.Join(m.dir, "mid.ckpt"))
}

// TestNoCheckpointMidStep: a per-step hook cannot save a checkpoint whose
// weights and position disagree; it is told where to save instead.
func TestNoCheckpointMidStep(t *testing.T) {
	dir := t.TempDir()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 1, DefaultRootDir: dir, Callbacks: []trainer.Callback{midStepSaver{dir}}}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, regression(t, 32, 0.01, 1), 16, false, false), nil)
	if err == nil || !strings.Contains(err.Error(), "callbacks/saver.OnAfterOptimizerStep: a checkpoint cannot be saved in OnAfterOptimizerStep") || !strings.Contains(err.Error(), "save in OnTrainBatchEnd") {
		t.Errorf("Fit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "mid.ckpt")); err == nil {
		t.Error("mid.ckpt was written")
	}
}
