package trainer_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// evalReg is linreg with a test and a predict step: what a user builds again
// after Fit to test or predict with.
type evalReg struct{ linreg }

func newEvalReg() *evalReg { return &evalReg{linreg{in: 4, lr: 0.05}} }

func (m *evalReg) TestStep(s *module.Step) error {
	s.Log("test_loss", m.loss(s))
	return nil
}

func (m *evalReg) PredictStep(s *module.Step) (*G.Node, error) {
	pred := G.Must(G.Mul(s.Input("x"), s.Param("w")))
	return G.BroadcastAdd(pred, s.Param("b"), nil, []byte{0})
}

// wideReg declares "w" with another shape than evalReg.
type wideReg struct{ evalReg }

func (m *wideReg) Configure(b *module.Builder) error {
	b.Param("w", []int{4, 2}, module.Normal(0, 0.1))
	b.Param("b", []int{1}, module.Zeros())
	return nil
}

func TestEvaluateAfterFitUsesTrainedWeightsOnAnyMatchingValue(t *testing.T) {
	ctx := context.Background()
	ds := regression(t, 300, 0.01, 4)
	test := loader(t, regression(t, 70, 0.01, 5), 16, false, false)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 8, Seed: 3, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	fitted := newEvalReg()
	if err := tr.Fit(ctx, fitted, loader(t, ds, 32, true, false), nil); err != nil {
		t.Fatal(err)
	}
	want, err := tr.Test(ctx, fitted, test)
	if err != nil {
		t.Fatal(err)
	}
	if !(want["test_loss"] < 0.01) {
		t.Fatalf("the fitted value tests at loss %g: training did not work, the comparison below means nothing", want["test_loss"])
	}
	// A model built again, the normal pattern after Fit.
	got, err := tr.Test(ctx, newEvalReg(), test)
	if err != nil {
		t.Fatal(err)
	}
	if got["test_loss"] != want["test_loss"] {
		t.Errorf("Test on a fresh module value: loss %g, on the fitted value %g: the fresh value must use the trained weights", got["test_loss"], want["test_loss"])
	}
	// An untrained model (a new Trainer) is far worse, so equality above is
	// not an accident.
	fresh, _ := trainer.New(quiet(trainer.Config{Seed: 3}))
	untrained, err := fresh.Test(ctx, newEvalReg(), test)
	if err != nil {
		t.Fatal(err)
	}
	if !(untrained["test_loss"] > 100*want["test_loss"]) {
		t.Errorf("untrained loss %g, trained %g: expected a large gap", untrained["test_loss"], want["test_loss"])
	}
	vw, err := tr.Validate(ctx, fitted, test)
	if err != nil {
		t.Fatal(err)
	}
	vg, err := tr.Validate(ctx, newEvalReg(), test)
	if err != nil {
		t.Fatal(err)
	}
	if vg["val_loss"] != vw["val_loss"] {
		t.Errorf("Validate on a fresh value: %g, on the fitted value %g", vg["val_loss"], vw["val_loss"])
	}
	preds, err := tr.Predict(ctx, newEvalReg(), test)
	if err != nil {
		t.Fatal(err)
	}
	checkPredictions(t, preds, tr.Store(), test.Dataset().Len(), 16, regression(t, 70, 0.01, 5))
}

// checkPredictions compares predictions with x·w + b computed from the
// store by hand, row by row in dataset order.
func checkPredictions(t *testing.T, preds []*tensor.Dense, st *module.Store, n, bs int, ds interface {
	Read(int, [][]float32) error
}) {
	t.Helper()
	w := st.Data32()
	row := 0
	for bi, p := range preds {
		if p.Shape()[0] != min(bs, n-row) {
			t.Fatalf("batch %d has shape %v, want %d rows", bi, p.Shape(), min(bs, n-row))
		}
		for _, v := range p.Float32s() {
			x, y := make([]float32, 4), make([]float32, 1)
			if err := ds.Read(row, [][]float32{x, y}); err != nil {
				t.Fatal(err)
			}
			want := w[4]
			for j := range x {
				want += x[j] * w[j]
			}
			if math.Abs(float64(v-want)) > 1e-5 {
				t.Fatalf("prediction of row %d is %g, want %g (x·w+b with the trained weights)", row, v, want)
			}
			row++
		}
	}
	if row != n {
		t.Fatalf("got %d predictions, want %d", row, n)
	}
}

func TestEvaluateMismatchedModuleNamesTheParameter(t *testing.T) {
	ctx := context.Background()
	ds := regression(t, 64, 0.01, 4)
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir()}))
	if err := tr.Fit(ctx, newEvalReg(), loader(t, ds, 32, false, false), nil); err != nil {
		t.Fatal(err)
	}
	_, err := tr.Test(ctx, &wideReg{}, loader(t, ds, 32, false, false))
	if err == nil {
		t.Fatal("Test on a module declaring w [4 2] after fitting w [4 1]: no error")
	}
	for _, s := range []string{`"w"`, "[4 1]", "[4 2]"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	if strings.Contains(err.Error(), `"b"`) {
		t.Errorf("error %q names b, which matches", err)
	}
}

func TestEvaluateCheckpointLastBestPath(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ds := regression(t, 200, 0.01, 4)
	val := loader(t, regression(t, 48, 0.01, 6), 16, false, false)
	test := loader(t, regression(t, 70, 0.01, 5), 16, false, false)
	fit := func(epochs int, cbs ...trainer.Callback) *trainer.Trainer {
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: epochs, Seed: 3, Deterministic: true, DefaultRootDir: root, Callbacks: cbs, DisableCheckpointing: len(cbs) == 0}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(ctx, newEvalReg(), loader(t, ds, 32, true, false), val); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	// "max" of val_loss: the best checkpoint is the first epoch's (the
	// loss falls), so best and last differ.
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: filepath.Join(root, "checkpoints"), Monitor: "val_loss", Mode: "max", SaveLast: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := fit(4, mc)
	trained, err := tr.Test(ctx, newEvalReg(), test)
	if err != nil {
		t.Fatal(err)
	}
	oneEpoch, err := fit(1).Test(ctx, newEvalReg(), test)
	if err != nil {
		t.Fatal(err)
	}
	if trained["test_loss"] == oneEpoch["test_loss"] {
		t.Fatalf("1 and 4 epochs test alike (%g): the test cannot tell checkpoints apart", trained["test_loss"])
	}
	bestPath, err := trainer.ResolveCheckpoint(root, "best")
	if err != nil {
		t.Fatal(err)
	}
	if bestPath != mc.BestModelPath() {
		t.Errorf(`ResolveCheckpoint(root, "best") = %s, ModelCheckpoint recorded %s`, bestPath, mc.BestModelPath())
	}
	cases := []struct {
		name, which string
		want        float64
	}{
		{"last on the fitting trainer", "last", trained["test_loss"]},
		{"best on the fitting trainer", "best", oneEpoch["test_loss"]},
		{"path", bestPath, oneEpoch["test_loss"]},
	}
	for _, c := range cases {
		got, err := tr.Test(ctx, newEvalReg(), test, trainer.WithCheckpoint(c.which))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got["test_loss"] != c.want {
			t.Errorf("%s: test_loss %g, want %g", c.name, got["test_loss"], c.want)
		}
	}
	// A new Trainer (no Fit) finds them under the root too.
	for _, c := range []struct {
		which string
		want  float64
	}{{"last", trained["test_loss"]}, {"best", oneEpoch["test_loss"]}} {
		nt, _ := trainer.New(quiet(trainer.Config{Seed: 99, DefaultRootDir: root}))
		got, err := nt.Test(ctx, newEvalReg(), test, trainer.WithCheckpoint(c.which))
		if err != nil {
			t.Fatalf("new trainer, %s: %v", c.which, err)
		}
		if got["test_loss"] != c.want {
			t.Errorf("new trainer, %s: test_loss %g, want %g", c.which, got["test_loss"], c.want)
		}
	}
}

func TestResolveCheckpointListsWhatExists(t *testing.T) {
	empty := t.TempDir()
	for _, which := range []string{"last", "best"} {
		_, err := trainer.ResolveCheckpoint(empty, which)
		if err == nil || !strings.Contains(err.Error(), "no checkpoint (*.ckpt)") {
			t.Errorf("%s under an empty root: %v", which, err)
		}
	}
	// A root that does not exist (no run yet, or a mistyped -root-dir)
	// says what to do as the empty root does.
	for _, which := range []string{"last", "best"} {
		_, err := trainer.ResolveCheckpoint(filepath.Join(empty, "none"), which)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(empty, "none")+": it does not exist: train first, or pass a checkpoint file") {
			t.Errorf("%s under a missing root: %v", which, err)
		}
	}
	// A root holding only an epoch checkpoint without ModelCheckpoint state.
	root := t.TempDir()
	ds := regression(t, 64, 0.01, 4)
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: root, DisableCheckpointing: true}))
	if err := tr.Fit(context.Background(), newEvalReg(), loader(t, ds, 32, false, false), nil); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "run", "checkpoints"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "run", "checkpoints", "epoch=0-step=2.ckpt")
	if err := tr.SaveCheckpoint(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	for _, which := range []string{"last", "best"} {
		_, err := trainer.ResolveCheckpoint(root, which)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v does not list %s", which, err, p)
		}
	}
	_, err := trainer.ResolveCheckpoint(root, filepath.Join(root, "nope.ckpt"))
	if err == nil || !strings.Contains(err.Error(), "nope.ckpt") {
		t.Errorf("a missing path: %v", err)
	}
	// A run directory where a file belongs (-ckpt-path runs/.../version_0)
	// is refused at once, saying what to pass; it used to fail later with
	// "read DIR: is a directory".
	_, err = trainer.ResolveCheckpoint(root, filepath.Join(root, "run"))
	if err == nil || !strings.Contains(err.Error(), "is a directory") || !strings.Contains(err.Error(), filepath.Join(root, "run", "checkpoints", "last.ckpt")) {
		t.Errorf("a directory: %v", err)
	}
}

func TestFromCheckpointLastResumes(t *testing.T) {
	ctx := context.Background()
	job := newResumeJob(t, 1, 0)
	want := job.run(t, "").Store().SHA256() // 3 epochs uninterrupted
	root := t.TempDir()
	run := func(epochs int, ckpt string) *trainer.Trainer {
		cfg := quiet(job.cfg)
		cfg.MaxEpochs, cfg.DefaultRootDir = epochs, root
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: filepath.Join(root, "lightning_logs", "version_0", "checkpoints"), LastOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Callbacks, cfg.DisableCheckpointing = []trainer.Callback{mc}, false // the ModelCheckpoint writes them
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var opts []trainer.FitOption
		if ckpt != "" {
			opts = append(opts, trainer.FromCheckpoint(ckpt))
		}
		if err := tr.Fit(ctx, job.mod(), job.train, job.val, opts...); err != nil {
			t.Fatalf("Fit %d epochs from %q: %v", epochs, ckpt, err)
		}
		return tr
	}
	run(2, "")
	if got := run(3, "last").Store().SHA256(); got != want {
		t.Errorf(`2 epochs, then FromCheckpoint("last") to 3: weights %s, uninterrupted %s`, got, want)
	}
}

// TestDDPEvaluateAfterFitOnRunningRanks fits two inproc DDP ranks, then
// tests and predicts on fresh module values: the ranks that trained
// evaluate their weights, and Predict returns every row in dataset order.
func TestDDPEvaluateAfterFitOnRunningRanks(t *testing.T) {
	ctx := context.Background()
	group, err := inproc.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	teardownAtEnd(t, nil, group)
	trainDS := regression(t, 200, 0.01, 4)
	testDS := regression(t, 37, 0.01, 5) // odd: uneven shards
	const bs = 8
	type result struct {
		test  map[string]float64
		preds []*tensor.Dense
		err   error
	}
	res := make([]result, 2)
	trs := make([]*trainer.Trainer, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 20, Seed: 3, StrategyImpl: d, DefaultRootDir: t.TempDir(), HandleSignals: trainer.Bool(false)}))
		if err != nil {
			t.Fatal(err)
		}
		trs[r] = tr
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := &res[r]
			if rr.err = tr.Fit(ctx, newEvalReg(), loader(t, trainDS, 16, true, false), nil); rr.err != nil {
				return
			}
			if rr.test, rr.err = tr.Test(ctx, newEvalReg(), loader(t, testDS, bs, false, false)); rr.err != nil {
				return
			}
			rr.preds, rr.err = tr.Predict(ctx, newEvalReg(), loader(t, testDS, bs, false, false))
		}()
	}
	wg.Wait()
	for r := range res {
		if res[r].err != nil {
			t.Fatalf("rank %d: %v", r, res[r].err)
		}
	}
	// The reference: one process testing rank 0's weights.
	single, _ := trainer.New(quiet(trainer.Config{Seed: 3}))
	if _, err := single.Validate(ctx, newEvalReg(), loader(t, testDS, bs, false, false)); err != nil {
		t.Fatal(err)
	}
	copy(single.Store().Data32(), trs[0].Store().Data32())
	want, err := single.Test(ctx, newEvalReg(), loader(t, testDS, bs, false, false))
	if err != nil {
		t.Fatal(err)
	}
	if !(want["test_loss"] < 0.01) {
		t.Fatalf("trained test loss %g: training did not work", want["test_loss"])
	}
	for r := range res {
		if got := res[r].test["test_loss"]; math.Abs(got-want["test_loss"]) > 1e-6*want["test_loss"]+1e-9 {
			t.Errorf("rank %d: test_loss %g after Fit on a fresh value, one process on the trained weights %g", r, got, want["test_loss"])
		}
		checkPredictions(t, res[r].preds, trs[0].Store(), testDS.Len(), bs, testDS)
	}
}

// TestEvaluateBestAfterFitWithDefaultCheckpoints: as with Lightning's
// default ModelCheckpoint, a Trainer that fitted with the built-in
// checkpoints (a plain Config) evaluates WithCheckpoint("best") on the
// newest epoch checkpoint it kept. It used to fail with "no checkpoint
// that records a best model (add a callbacks.ModelCheckpoint)".
func TestEvaluateBestAfterFitWithDefaultCheckpoints(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ds := regression(t, 200, 0.01, 4)
	test := loader(t, regression(t, 70, 0.01, 5), 16, false, false)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 3, Deterministic: true, DefaultRootDir: root}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(ctx, newEvalReg(), loader(t, ds, 32, true, false), nil); err != nil {
		t.Fatal(err)
	}
	epochCkpts, _ := filepath.Glob(filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "epoch=1-step=*.ckpt"))
	if len(epochCkpts) != 1 {
		t.Fatalf("the default checkpoints are %v, want one epoch=1-step=N.ckpt", epochCkpts)
	}
	want, err := tr.Test(ctx, newEvalReg(), test, trainer.WithCheckpoint(epochCkpts[0]))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tr.Test(ctx, newEvalReg(), test, trainer.WithCheckpoint("best"))
	if err != nil {
		t.Fatalf(`Test with WithCheckpoint("best") after Fit with the default checkpoints: %v`, err)
	}
	if got["test_loss"] != want["test_loss"] {
		t.Errorf(`WithCheckpoint("best"): test_loss %g, the epoch checkpoint's %g`, got["test_loss"], want["test_loss"])
	}
}

// TestResumeWithNothingLeftToTrainSaysSo: a run that MaxSteps stopped
// mid-epoch counts that epoch as done, so resuming it with a higher
// MaxSteps but the same MaxEpochs trains no step. Fit used to return as if
// it had trained, without a word; it now warns and names what to raise.
func TestResumeWithNothingLeftToTrainSaysSo(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ds := regression(t, 200, 0.01, 4)
	fit := func(maxSteps int, opts ...trainer.FitOption) (*trainer.Trainer, string) {
		var out strings.Builder
		cfg := quiet(trainer.Config{MaxEpochs: 1, MaxSteps: maxSteps, Seed: 3, DefaultRootDir: root})
		cfg.Out = &out
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(ctx, newEvalReg(), loader(t, ds, 16, true, false), nil, opts...); err != nil {
			t.Fatal(err)
		}
		return tr, out.String()
	}
	if tr, _ := fit(3); tr.Stats().GlobalStep != 3 {
		t.Fatalf("the first run trained %d steps, want 3", tr.Stats().GlobalStep)
	}
	tr, log := fit(6, trainer.FromCheckpoint("last"))
	if got := tr.Stats().GlobalStep; got != 3 {
		t.Fatalf("the resumed run ended at step %d; this test expects 3 (the epoch counted as done)", got)
	}
	if !strings.Contains(log, "nothing left to train") || !strings.Contains(log, "raise MaxEpochs or MaxSteps") {
		t.Errorf("a resumed Fit that trained no step did not say why:\n%s", log)
	}
	if _, log := fit(0); strings.Contains(log, "nothing left to train") {
		t.Errorf("a fresh Fit warned of nothing left to train:\n%s", log)
	}
}

// failingStep is evalReg whose training step fails, as a model with a
// shape error does in its first step.
type failingStep struct{ evalReg }

func (m *failingStep) TrainingStep(s *module.Step) (*G.Node, error) {
	return nil, errors.New("nn.Linear \"fc1\": input has shape (16, 4), want [batch, 3]")
}

// TestFailedFitLeavesNoEmptyRunDirectory: a Fit that fails before writing
// anything used to leave an empty ROOT/lightning_logs/version_0 behind, and
// the next run went into version_1.
func TestFailedFitLeavesNoEmptyRunDirectory(t *testing.T) {
	root := t.TempDir()
	ds := regression(t, 64, 0.01, 4)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: root}))
	if err != nil {
		t.Fatal(err)
	}
	m := &failingStep{*newEvalReg()}
	if err := tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), nil); err == nil || !strings.Contains(err.Error(), "fc1") {
		t.Fatalf("Fit: %v, want the step's error", err)
	}
	if runs, _ := filepath.Glob(filepath.Join(root, "lightning_logs", "version_*")); len(runs) != 0 {
		t.Errorf("the failed Fit left %v", runs)
	}
	tr, err = trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: root}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), newEvalReg(), loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")); err != nil {
		t.Errorf("the next Fit: %v", err)
	}
}

// TestPredictIsInDatasetOrder: Predict with a shuffling loader returned the
// rows in the shuffled order on one device and under dp, and in dataset
// order under ddp, with nothing to tell them apart. Every strategy now
// predicts in dataset order.
func TestPredictIsInDatasetOrder(t *testing.T) {
	ds := regression(t, 37, 0.01, 5)
	for _, c := range []struct {
		name    string
		devices int
		strat   string
	}{{"one device", 1, ""}, {"dp", 2, "dp"}} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := trainer.New(quiet(trainer.Config{Seed: 3, Devices: c.devices, Strategy: c.strat}))
			if err != nil {
				t.Fatal(err)
			}
			preds, err := tr.Predict(context.Background(), newEvalReg(), loader(t, ds, 8, true, false))
			if err != nil {
				t.Fatal(err)
			}
			checkPredictions(t, preds, tr.Store(), ds.Len(), 8, ds)
		})
	}
}
