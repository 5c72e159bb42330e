package trainer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/trainer"
)

// linreg fits y = x·w + b with a mean squared error, built from Gorgonia's
// own ops so the trainer is tested apart from nn.
type linreg struct {
	in      int
	lr      float64
	sgd     bool
	nanAt   int // make the loss NaN from this step on (0: never)
	steps   int
	calls   map[string]int
	stopAt  int
	scale   float64
	epochLR []float64
}

func (m *linreg) Configure(b *module.Builder) error {
	b.Param("w", []int{m.in, 1}, module.Normal(0, 0.1))
	b.Param("b", []int{1}, module.Zeros())
	return nil
}

func (m *linreg) TrainingStep(s *module.Step) (*G.Node, error) {
	loss := m.loss(s)
	s.Log("train_loss", loss, module.ProgBar(), module.OnEpoch(true))
	return loss, nil
}

func (m *linreg) loss(s *module.Step) *G.Node {
	x, y := s.Input("x"), s.Input("y")
	pred := G.Must(G.Mul(x, s.Param("w")))
	pred = G.Must(G.BroadcastAdd(pred, s.Param("b"), nil, []byte{0}))
	pred = G.Must(G.Reshape(pred, []int{s.BatchSize()}))
	d := G.Must(G.Sub(pred, y))
	loss := G.Must(G.Mean(G.Must(G.Square(d))))
	if m.scale != 0 {
		loss = G.Must(G.Mul(loss, G.NewConstant(float32(m.scale))))
	}
	return loss
}

func (m *linreg) ValidationStep(s *module.Step) error {
	s.Log("val_loss", m.loss(s))
	return nil
}

func (m *linreg) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	if m.sgd {
		o, err := optim.NewSGD(optim.SGDConfig{LR: m.lr})
		return o, nil, err
	}
	o, err := optim.NewAdam(optim.AdamConfig{LR: m.lr})
	return o, nil, err
}

func (m *linreg) OnTrainEpochEnd(ctx context.Context, epoch int) error {
	if m.calls == nil {
		m.calls = map[string]int{}
	}
	m.calls["OnTrainEpochEnd"]++
	return nil
}

var trueW = []float32{0.5, -1.5, 2, 0.25}

const trueB = 0.75

func regression(t testing.TB, n int, noise float64, seed uint64) *data.InMemory {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n*len(trueW))
	y := make([]float32, n)
	for i := 0; i < n; i++ {
		s := float32(trueB)
		for j, w := range trueW {
			v := float32(r.NormFloat64())
			x[i*len(trueW)+j] = v
			s += v * w
		}
		y[i] = s + float32(noise*r.NormFloat64())
	}
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{len(trueW)}}, {Name: "y"}}, [][]float32{x, y})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func loader(t testing.TB, ds data.Dataset, bs int, shuffle, dropLast bool) *data.Loader {
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: bs, Shuffle: shuffle, DropLast: dropLast, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func quiet(cfg trainer.Config) trainer.Config {
	cfg.Out = io.Discard
	cfg.EnableProgressBar = trainer.Bool(false)
	if cfg.DefaultRootDir == "" && cfg.LogDir == "" {
		// Write no run directory into the package's source directory.
		cfg.DisableCheckpointing, cfg.DisableLogger = true, true
	}
	return cfg
}

func TestFitLearnsLinearRegression(t *testing.T) {
	ds := regression(t, 500, 0.01, 1)
	m := &linreg{in: 4, lr: 0.05}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 20, Seed: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), m, loader(t, ds, 32, true, false), loader(t, ds, 100, false, false)); err != nil {
		t.Fatal(err)
	}
	w := tr.Store().Data32()
	for j, want := range trueW {
		if math.Abs(float64(w[j]-want)) > 0.02 {
			t.Errorf("w[%d] = %.4f, want %.4f ± 0.02 (store %v)", j, w[j], want, w[:5])
		}
	}
	if math.Abs(float64(w[4])-trueB) > 0.02 {
		t.Errorf("b = %.4f, want %.4f", w[4], trueB)
	}
	met := tr.Metrics()
	if v := met["val_loss"]; !(v < 1e-3) {
		t.Errorf("val_loss = %g, want < 1e-3 (metrics %v)", v, met)
	}
	if _, ok := met["train_loss_epoch"]; !ok {
		t.Errorf("train_loss_epoch not recorded: %v", met)
	}
	st := tr.Stats()
	// 500 rows at batch 32 is 15 full batches and one of 20: the partial
	// batch must be trained on, not dropped.
	if st.GlobalStep != 20*16 || st.TrainSamples != 20*500 || st.Epochs != 20 {
		t.Errorf("stats = %+v, want 320 steps, 10000 samples, 20 epochs", st)
	}
	if m.calls["OnTrainEpochEnd"] != 20 {
		t.Errorf("OnTrainEpochEnd called %d times, want 20", m.calls["OnTrainEpochEnd"])
	}
}

func TestDropLastSkipsPartialBatch(t *testing.T) {
	ds := regression(t, 100, 0, 1)
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, true), nil); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.GlobalStep != 3 || st.TrainSamples != 96 {
		t.Errorf("stats = %+v, want 3 steps over 96 samples", st)
	}
}

func fitHash(t *testing.T, cfg trainer.Config, m module.Module, l *data.Loader) string {
	t.Helper()
	tr, err := trainer.New(quiet(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), m, l, nil); err != nil {
		t.Fatal(err)
	}
	return tr.Store().SHA256()
}

func TestSameSeedSameWeights(t *testing.T) {
	ds := regression(t, 200, 0.1, 2)
	cfg := trainer.Config{MaxEpochs: 2, Seed: 11, Deterministic: true}
	a := fitHash(t, cfg, &linreg{in: 4, lr: 0.01}, loader(t, ds, 16, true, false))
	b := fitHash(t, cfg, &linreg{in: 4, lr: 0.01}, loader(t, ds, 16, true, false))
	if a != b {
		t.Fatalf("two seeded runs differ: %s vs %s", a, b)
	}
	cfg.Seed = 12
	if c := fitHash(t, cfg, &linreg{in: 4, lr: 0.01}, loader(t, ds, 16, true, false)); c == a {
		t.Fatalf("a different seed gave the same weights %s", c)
	}
}

func TestAccumulateMatchesLargerBatch(t *testing.T) {
	// With SGD, accumulating 4 batches of 8 equals one batch of 32 (the loss
	// is a mean, and accumulated gradients are scaled by 1/4).
	ds := regression(t, 64, 0.1, 3)
	big := &linreg{in: 4, lr: 0.1, sgd: true}
	tb, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 3, Seed: 5}))
	if err := tb.Fit(context.Background(), big, loader(t, ds, 32, false, false), nil); err != nil {
		t.Fatal(err)
	}
	small := &linreg{in: 4, lr: 0.1, sgd: true}
	ts, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 3, Seed: 5, AccumulateGradBatches: 4}))
	if err := ts.Fit(context.Background(), small, loader(t, ds, 8, false, false), nil); err != nil {
		t.Fatal(err)
	}
	if tb.Stats().GlobalStep != 6 || ts.Stats().GlobalStep != 6 {
		t.Fatalf("steps = %d and %d, want 6 each", tb.Stats().GlobalStep, ts.Stats().GlobalStep)
	}
	a, b := tb.Store().Data32(), ts.Store().Data32()
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-5 {
			t.Errorf("param %d: batch 32 gives %.7f, 4×8 accumulated gives %.7f", i, a[i], b[i])
		}
	}
}

func TestNaNLossStopsWithStep(t *testing.T) {
	ds := regression(t, 64, 0, 1)
	m := &linreg{in: 4, lr: 0.01, scale: math.Inf(1)}
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	err := tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), nil)
	if err == nil || !strings.Contains(err.Error(), "global step 0") || !strings.Contains(err.Error(), "WarnOnNaN") {
		t.Fatalf("err = %v, want a NaN/Inf loss error naming the step and the WarnOnNaN option", err)
	}
	var buf bytes.Buffer
	cfg := quiet(trainer.Config{MaxEpochs: 1, WarnOnNaN: true})
	cfg.Out = &buf
	tr, _ = trainer.New(cfg)
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01, scale: math.Inf(1)}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatalf("with WarnOnNaN: %v", err)
	}
	if !strings.Contains(buf.String(), "non-finite loss") {
		t.Errorf("no warning logged: %q", buf.String())
	}
}

func TestMaxStepsAndLimits(t *testing.T) {
	ds := regression(t, 320, 0, 1)
	tr, _ := trainer.New(quiet(trainer.Config{MaxSteps: 7}))
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), nil); err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 7 {
		t.Errorf("GlobalStep = %d, want 7", s.GlobalStep)
	}
	tr, _ = trainer.New(quiet(trainer.Config{MaxEpochs: 2, LimitTrainBatches: 3}))
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), nil); err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 6 || s.Epochs != 2 {
		t.Errorf("stats = %+v, want 6 steps over 2 epochs", s)
	}
	tr, _ = trainer.New(quiet(trainer.Config{FastDevRun: 2, MaxEpochs: 5}))
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), loader(t, ds, 32, false, false)); err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 2 || s.Epochs != 1 || s.ValidationsPassed != 1 {
		t.Errorf("fast dev run stats = %+v, want 2 steps, 1 epoch, 1 validation", s)
	}
}

func TestValCheckInterval(t *testing.T) {
	ds := regression(t, 320, 0, 1)
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 2, ValCheckInterval: 4, CheckValEveryNEpoch: 1}))
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), loader(t, ds, 64, false, false)); err != nil {
		t.Fatal(err)
	}
	// 10 batches an epoch: validation after batch 4 and 8, and at the end.
	if s := tr.Stats(); s.ValidationsPassed != 6 {
		t.Errorf("validations = %d, want 6", s.ValidationsPassed)
	}
}

type stopper struct{ after int }

func (s *stopper) Name() string { return "stopper" }
func (s *stopper) OnTrainBatchEnd(ctx context.Context, st *trainer.State) error {
	if st.GlobalStep >= s.after {
		return trainer.Stop("reached %d steps", s.after)
	}
	return nil
}

type failing struct{}

func (failing) Name() string { return "failing" }
func (failing) OnFitStart(ctx context.Context, st *trainer.State) error {
	return errors.New("disk full")
}

func TestCallbacksStopAndErrors(t *testing.T) {
	ds := regression(t, 320, 0, 1)
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 3, Callbacks: []trainer.Callback{&stopper{after: 5}}}))
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), nil); err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 5 || s.StoppedEarly != "reached 5 steps" {
		t.Errorf("stats = %+v, want stop at 5 steps", s)
	}
	tr, _ = trainer.New(quiet(trainer.Config{MaxEpochs: 1, Callbacks: []trainer.Callback{failing{}}}))
	err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), nil)
	if err == nil || err.Error() != "callbacks/failing.OnFitStart: disk full" {
		t.Fatalf("err = %v, want the hook's name wrapped around its error", err)
	}
}

func TestConfigValidateReportsEverything(t *testing.T) {
	cfg := trainer.Config{MaxEpochs: -2, Devices: -3, Precision: "16", Strategy: "bogus", GradientClipAlgorithm: "l3", AccumulateGradBatches: -2}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"MaxEpochs is -2", "Devices is -3: use 1 or more, or -1 for all", "Precision is \"16\"", "Strategy is \"bogus\"", "GradientClipAlgorithm is \"l3\"", "AccumulateGradBatches is -2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// A shipped name in another case gets the name to write.
	upper := trainer.Config{Strategy: "DDP"}
	if err := upper.Validate(); err == nil || !strings.Contains(err.Error(), `Strategy is "DDP": names are lower case: write "ddp"`) {
		t.Errorf("Strategy DDP: %v, want the lower-case name to write", err)
	}
	good := trainer.Config{}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if good.MaxEpochs != 1000 || good.Devices != 1 || good.Strategy != "auto" || good.Precision != "32" || good.LogEveryNSteps != 50 {
		t.Errorf("defaults = %+v", good)
	}
}

type badShape struct{ linreg }

func (m *badShape) TrainingStep(s *module.Step) (*G.Node, error) {
	x := s.Input("x")
	w := s.Param("w")
	_ = G.Must(G.Mul(w, x)) // [4,1] x [B,4]: wrong order
	return nil, nil
}

func TestBuildErrorsNameTheProblem(t *testing.T) {
	ds := regression(t, 64, 0, 1)
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	err := tr.Fit(context.Background(), &badShape{linreg{in: 4}}, loader(t, ds, 16, false, false), nil)
	if err == nil || !strings.Contains(err.Error(), "TrainingStep") {
		t.Fatalf("err = %v, want an error naming TrainingStep", err)
	}
	m := &missingInput{linreg{in: 4}}
	tr, _ = trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	err = tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), nil)
	if err == nil || !strings.Contains(err.Error(), `step input "image" does not exist: the batch has fields [x y]`) {
		t.Fatalf("err = %v", err)
	}
}

type missingInput struct{ linreg }

func (m *missingInput) TrainingStep(s *module.Step) (*G.Node, error) {
	return s.Input("image"), nil
}

func TestFloat64Precision(t *testing.T) {
	ds := regression(t, 200, 0.01, 4)
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 15, Precision: "64"}))
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 20, true, false), nil); err != nil {
		t.Fatal(err)
	}
	w := tr.Store().Data64()
	if w == nil || math.Abs(w[1]-float64(trueW[1])) > 0.03 {
		t.Fatalf("float64 weights = %v, want w[1] ≈ %v", w, trueW[1])
	}
}

func (m *linreg) PredictStep(s *module.Step) (*G.Node, error) {
	pred := G.Must(G.Mul(s.Input("x"), s.Param("w")))
	return G.Must(G.BroadcastAdd(pred, s.Param("b"), nil, []byte{0})), nil
}

// After Fit, Validate and Predict run on the trained parameters: predictions
// equal x·w + b computed by hand from the store, batch by batch, including a
// last partial batch.
func TestValidateAndPredictUseTrainedWeights(t *testing.T) {
	ds := regression(t, 50, 0, 5)
	m := &linreg{in: 4, lr: 0.05}
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 3}))
	if err := tr.Fit(context.Background(), m, loader(t, ds, 16, true, false), nil); err != nil {
		t.Fatal(err)
	}
	res, err := tr.Validate(context.Background(), m, loader(t, ds, 20, false, false))
	if err != nil || !(res["val_loss"] >= 0) {
		t.Fatalf("Validate = %v, %v", res, err)
	}
	outs, err := tr.Predict(context.Background(), m, loader(t, ds, 16, false, false))
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 4 || outs[3].Shape()[0] != 2 {
		t.Fatalf("got %d outputs, last of shape %v; want 4 batches, the last of 2 rows", len(outs), outs[len(outs)-1].Shape())
	}
	w := tr.Store().Data32()
	row := make([][]float32, 2)
	row[0], row[1] = make([]float32, 4), make([]float32, 1)
	i := 0
	for _, o := range outs {
		for _, got := range o.Data().([]float32) {
			if err := ds.Read(i, row); err != nil {
				t.Fatal(err)
			}
			want := w[4]
			for j := 0; j < 4; j++ {
				want += row[0][j] * w[j]
			}
			if math.Abs(float64(got-want)) > 1e-5 {
				t.Fatalf("prediction %d = %v, want %v", i, got, want)
			}
			i++
		}
	}
	if i != 50 {
		t.Fatalf("%d predictions, want 50", i)
	}
}

// scalarPredict is linreg whose PredictStep sums its predictions: one
// number for the whole batch.
type scalarPredict struct{ linreg }

func (m *scalarPredict) PredictStep(s *module.Step) (*G.Node, error) {
	out, err := m.linreg.PredictStep(s)
	if err != nil {
		return nil, err
	}
	return G.Sum(out)
}

// A PredictStep that returns a scalar fails Predict saying what predictions
// need (it said "the graph produced no output", which a scalar is not); on
// one device and under dp here, on the ranks of ddp, sharded and fsdp in
// scalarpredict_test.go.
func TestPredictOfAScalarSaysWhy(t *testing.T) {
	ds := regression(t, 20, 0, 5)
	for _, c := range []struct {
		strat   string
		devices int
	}{{"single", 1}, {"dp", 2}} {
		m := &scalarPredict{linreg{in: 4, lr: 0.05}}
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Strategy: c.strat, Devices: c.devices}))
		if err != nil {
			t.Fatalf("%s: %v", c.strat, err)
		}
		outs, err := tr.Predict(context.Background(), m, loader(t, ds, 8, false, false))
		if !errors.Is(err, strategy.ErrScalarPrediction) || !strings.Contains(err.Error(), "first axis is the batch") {
			t.Errorf("%s: Predict of a scalar = %d outputs, %v; want strategy.ErrScalarPrediction", c.strat, len(outs), err)
		}
	}
}
