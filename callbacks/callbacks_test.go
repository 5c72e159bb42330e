package callbacks_test

import (
	"bytes"
	"context"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/trainer"
)

// linreg fits y = x·w + b from Gorgonia builtins.
type linreg struct{ sched bool }

func (m *linreg) Configure(b *module.Builder) error {
	fc := b.Scope("fc")
	fc.Param("w", []int{4, 1}, module.Normal(0, 0.1))
	fc.Param("b", []int{1}, module.Zeros())
	fc.Layer("Linear", 5)
	return nil
}

func (m *linreg) loss(s *module.Step) *G.Node {
	pred := G.Must(G.Mul(s.Input("x"), s.Param("fc.w")))
	pred = G.Must(G.BroadcastAdd(pred, s.Param("fc.b"), nil, []byte{0}))
	pred = G.Must(G.Reshape(pred, []int{s.BatchSize()}))
	return G.Must(G.Mean(G.Must(G.Square(G.Must(G.Sub(pred, s.Input("y")))))))
}

func (m *linreg) TrainingStep(s *module.Step) (*G.Node, error) {
	l := m.loss(s)
	s.Log("train_loss", l, module.OnEpoch(true))
	return l, nil
}

func (m *linreg) ValidationStep(s *module.Step) error {
	s.Log("val_loss", m.loss(s))
	return nil
}

func (m *linreg) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewAdam(optim.AdamConfig{LR: 0.05})
	if err != nil || !m.sched {
		return o, nil, err
	}
	s, err := optim.NewStepLR(0.05, 4, 0.5)
	return o, s, err
}

func (m *linreg) HParams() map[string]any {
	return map[string]any{"lr": 0.05, "optimizer": "adam", "layers": 1, "bias": true}
}

// regression has 16 batches of 32 (512 rows).
func regression(t testing.TB) (*data.Loader, *data.Loader) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 512
	x := make([]float32, n*4)
	y := make([]float32, n)
	for i := range y {
		s := float32(0.75)
		for j, w := range []float32{0.5, -1.5, 2, 0.25} {
			v := float32(r.NormFloat64())
			x[i*4+j] = v
			s += v * w
		}
		y[i] = s
	}
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{4}}, {Name: "y"}}, [][]float32{x, y})
	if err != nil {
		t.Fatal(err)
	}
	train, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 32, Shuffle: true, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	val, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 128})
	if err != nil {
		t.Fatal(err)
	}
	return train, val
}

func fit(t *testing.T, cfg trainer.Config, withVal bool, opts ...trainer.FitOption) (*trainer.Trainer, error) {
	t.Helper()
	cfg.Out = io.Discard
	if cfg.EnableProgressBar == nil {
		cfg.EnableProgressBar = trainer.Bool(false)
	}
	if cfg.DefaultRootDir == "" {
		cfg.DefaultRootDir = t.TempDir()
	}
	cfg.Seed = 5
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	train, val := regression(t)
	if !withVal {
		val = nil
	}
	return tr, tr.Fit(context.Background(), &linreg{}, train, val, opts...)
}

// script overwrites a metric at each validation (or epoch end without
// validation) with the next value of a sequence; it must come before the
// callback under test.
type script struct {
	name   string
	values []float64
	i      int
}

func (s *script) Name() string { return "script" }
func (s *script) OnValidationEnd(ctx context.Context, st *trainer.State) error {
	if st.SanityChecking {
		return nil
	}
	s.i++
	return st.LogMetrics(map[string]float64{s.name: s.values[(s.i-1)%len(s.values)]})
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func TestEarlyStoppingDecisions(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	cases := []struct {
		name   string
		cfg    callbacks.EarlyStoppingConfig
		seq    []float64
		stopAt int // index of the value that stops; -1: never
		reason string
		best   float64
	}{
		{"min patience 3", callbacks.EarlyStoppingConfig{}, []float64{1, 0.9, 0.95, 0.91, 0.92, 0.5}, 4, "did not improve in the last 3 checks", 0.9},
		{"ties do not improve", callbacks.EarlyStoppingConfig{Patience: 2}, []float64{1, 1, 1}, 2, "did not improve in the last 2 checks", 1},
		{"min delta", callbacks.EarlyStoppingConfig{Patience: 2, MinDelta: 0.05}, []float64{1, 0.96, 0.94, 0.91, 0.9}, 4, "did not improve", 0.94},
		{"max", callbacks.EarlyStoppingConfig{Mode: "max", Patience: 2}, []float64{0.5, 0.6, 0.6, 0.59, 0.7}, 3, "did not improve", 0.6},
		{"max delta", callbacks.EarlyStoppingConfig{Mode: "max", Patience: 1, MinDelta: 0.1}, []float64{0.5, 0.65, 0.7}, 2, "did not improve", 0.65},
		{"patience never runs out", callbacks.EarlyStoppingConfig{Patience: 2}, []float64{5, 6, 4, 5, 3, 4, 2}, -1, "", 2},
		{"nan stops", callbacks.EarlyStoppingConfig{}, []float64{1, math.NaN()}, 1, "is not finite", 1},
		{"nan allowed", callbacks.EarlyStoppingConfig{AllowNonFinite: true, Patience: 2}, []float64{1, math.NaN(), 0.5}, -1, "", 0.5},
		{"stopping threshold", callbacks.EarlyStoppingConfig{StoppingThreshold: f(0.1)}, []float64{0.5, 0.2, 0.1, 0.05}, 3, "stopping threshold reached", 0.1},
		{"divergence", callbacks.EarlyStoppingConfig{DivergenceThreshold: f(10)}, []float64{1, 2, 10, 11}, 3, "divergence threshold reached", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Monitor = "val_loss"
			e, err := callbacks.NewEarlyStopping(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			stopAt := -1
			for i, v := range tc.seq {
				if stop, reason := e.Update(v); stop {
					stopAt = i
					if !strings.Contains(reason, tc.reason) {
						t.Errorf("reason %q, want %q", reason, tc.reason)
					}
					break
				}
			}
			if stopAt != tc.stopAt {
				t.Errorf("stopped at %d, want %d", stopAt, tc.stopAt)
			}
			if e.Best() != tc.best {
				t.Errorf("best = %v, want %v", e.Best(), tc.best)
			}
		})
	}
}

func TestEarlyStoppingInTrainer(t *testing.T) {
	es, _ := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "score", Patience: 2})
	sc := &script{name: "score", values: []float64{3, 2, 2.5, 2.1, 1}}
	tr, err := fit(t, trainer.Config{MaxEpochs: 10, Callbacks: []trainer.Callback{sc, es}}, true)
	if err != nil {
		t.Fatal(err)
	}
	st := tr.Stats()
	if st.Epochs != 4 || es.StoppedEpoch() != 3 || !strings.Contains(st.StoppedEarly, "did not improve in the last 2 checks") {
		t.Errorf("epochs %d, stopped epoch %d, reason %q; want a stop in epoch 3 (4 epochs)", st.Epochs, es.StoppedEpoch(), st.StoppedEarly)
	}
	es2, _ := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "nope"})
	_, err = fit(t, trainer.Config{MaxEpochs: 2, Callbacks: []trainer.Callback{es2}}, true)
	if err == nil || !strings.Contains(err.Error(), `callbacks/EarlyStopping.OnValidationEnd: EarlyStopping(Monitor "nope"): the metric was not logged; logged metrics are [`) {
		t.Errorf("err = %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{SaveTopK: 3, Mode: "best", EveryNEpochs: 2, EveryNTrainSteps: 5, Filename: "{epoch"})
	for _, want := range []string{`Mode is "best"`, "SaveTopK is 3 but Monitor is empty", "both set", "braces must pair up"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ModelCheckpoint err = %v, want %q", err, want)
		}
	}
	_, err = callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{MinDelta: -1, Patience: -2})
	for _, want := range []string{"Monitor is empty", "MinDelta is -1", "Patience is -2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("EarlyStopping err = %v, want %q", err, want)
		}
	}
	if _, err := callbacks.NewGradientAccumulationScheduler(map[int]int{-1: 2, 3: 0}); err == nil || !strings.Contains(err.Error(), "epoch -1 is negative") || !strings.Contains(err.Error(), "epoch 3 has factor 0") {
		t.Errorf("GradientAccumulationScheduler err = %v", err)
	}
	if _, err := callbacks.NewTimer(callbacks.TimerConfig{Interval: "hour"}); err == nil || !strings.Contains(err.Error(), "Duration is 0s") || !strings.Contains(err.Error(), `Interval is "hour"`) {
		t.Errorf("Timer err = %v", err)
	}
}

func TestModelCheckpointTopK(t *testing.T) {
	scores := []float64{5, 3, 4, 1, 2}
	cases := []struct {
		name  string
		cfg   callbacks.ModelCheckpointConfig
		files []string
		best  string
	}{
		{"min top 2", callbacks.ModelCheckpointConfig{Monitor: "score", SaveTopK: 2, Filename: "{epoch}-{score:.1f}"},
			[]string{"epoch=3-score=1.0.ckpt", "epoch=4-score=2.0.ckpt"}, "epoch=3-score=1.0.ckpt"},
		{"max top 2 and last", callbacks.ModelCheckpointConfig{Monitor: "score", Mode: "max", SaveTopK: 2, SaveLast: true, Filename: "best-{score:.0f}"},
			[]string{"best-score=4.ckpt", "best-score=5.ckpt", "last.ckpt"}, "best-score=5.ckpt"},
		{"default top 1", callbacks.ModelCheckpointConfig{Monitor: "score"},
			[]string{"epoch=3-step=64.ckpt"}, "epoch=3-step=64.ckpt"},
		{"keep all", callbacks.ModelCheckpointConfig{Monitor: "score", SaveTopK: -1, Filename: "{epoch}"},
			[]string{"epoch=0.ckpt", "epoch=1.ckpt", "epoch=2.ckpt", "epoch=3.ckpt", "epoch=4.ckpt"}, "epoch=3.ckpt"},
		{"no monitor keeps the newest", callbacks.ModelCheckpointConfig{},
			[]string{"epoch=4-step=80.ckpt"}, "epoch=4-step=80.ckpt"},
		{"last only", callbacks.ModelCheckpointConfig{LastOnly: true}, []string{"last.ckpt"}, ""},
		{"every 2 epochs", callbacks.ModelCheckpointConfig{EveryNEpochs: 2, SaveTopK: -1, Filename: "{epoch}"},
			[]string{"epoch=1.ckpt", "epoch=3.ckpt"}, "epoch=3.ckpt"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.cfg.Dirpath = dir
			mc, err := callbacks.NewModelCheckpoint(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			sc := &script{name: "score", values: scores}
			if _, err := fit(t, trainer.Config{MaxEpochs: 5, Callbacks: []trainer.Callback{sc, mc}}, true); err != nil {
				t.Fatal(err)
			}
			if got := files(t, dir); !reflect.DeepEqual(got, tc.files) {
				t.Errorf("files %v, want %v", got, tc.files)
			}
			if got := filepath.Base(mc.BestModelPath()); tc.best != "" && got != tc.best {
				t.Errorf("best %q, want %q", got, tc.best)
			}
			for _, f := range tc.files {
				if _, err := trainer.VerifyCheckpoint(filepath.Join(dir, f)); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestModelCheckpointEveryNStepsAndResume(t *testing.T) {
	dir := t.TempDir()
	mc, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, EveryNTrainSteps: 5, SaveTopK: -1, Filename: "{step:04d}", SaveLast: true})
	if _, err := fit(t, trainer.Config{MaxEpochs: 2, Callbacks: []trainer.Callback{mc}}, false); err != nil {
		t.Fatal(err)
	}
	want := []string{"last.ckpt", "step=0005.ckpt", "step=0010.ckpt", "step=0015.ckpt", "step=0020.ckpt", "step=0025.ckpt", "step=0030.ckpt"}
	if got := files(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	info, err := trainer.ReadCheckpointInfo(filepath.Join(dir, "step=0010.ckpt"))
	if err != nil || info.GlobalStep != 10 || info.Epoch != 0 || info.BatchIdx != 10 {
		t.Errorf("step 10: %+v %v", info, err)
	}
	// Resume from step 20 with a fresh callback: it carries on numbering
	// and keeps the files, and training ends where the first run did. The
	// first run's checkpoints after step 20 are no longer this callback's:
	// as Lightning's, it leaves them and names its own of those steps -v1.
	mc2, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, EveryNTrainSteps: 5, SaveTopK: -1, Filename: "{step:04d}", SaveLast: true})
	tr, err := fit(t, trainer.Config{MaxEpochs: 3, Callbacks: []trainer.Callback{mc2}}, false, trainer.FromCheckpoint(filepath.Join(dir, "step=0020.ckpt")))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Stats().GlobalStep != 48 || len(mc2.BestK()) != 9 {
		t.Errorf("global step %d, kept %d (%v); want 48 and 9", tr.Stats().GlobalStep, len(mc2.BestK()), mc2.BestK())
	}
	want = []string{"last.ckpt", "step=0005.ckpt", "step=0010.ckpt", "step=0015.ckpt", "step=0020.ckpt", "step=0025-v1.ckpt", "step=0025.ckpt",
		"step=0030-v1.ckpt", "step=0030.ckpt", "step=0035.ckpt", "step=0040.ckpt", "step=0045.ckpt"}
	if got := files(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("files after resume: %v, want %v", got, want)
	}
}

func TestModelCheckpointMissingMonitor(t *testing.T) {
	mc, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Monitor: "val_acc", Dirpath: t.TempDir()})
	_, err := fit(t, trainer.Config{MaxEpochs: 1, Callbacks: []trainer.Callback{mc}}, true)
	if err == nil || !strings.Contains(err.Error(), `callbacks/ModelCheckpoint.OnValidationEnd: ModelCheckpoint(Monitor "val_acc"): the metric was not logged; logged metrics are [train_loss_epoch train_loss_step val_loss] (and [train_loss], each the latest of its _step and _epoch values)`) {
		t.Fatalf("err = %v", err)
	}
}

// recorder is a trainer.Logger keeping what it is given.
type recorder struct {
	steps  []int
	rows   []map[string]float64
	hp     map[string]any
	status string
}

func (r *recorder) Name() string                          { return "recorder" }
func (r *recorder) LogHyperparams(h map[string]any) error { r.hp = h; return nil }
func (r *recorder) LogMetrics(step int, m map[string]float64) error {
	c := map[string]float64{}
	for k, v := range m {
		c[k] = v
	}
	r.steps, r.rows = append(r.steps, step), append(r.rows, c)
	return nil
}
func (r *recorder) Finalize(status string) error { r.status = status; return nil }

func TestLearningRateMonitor(t *testing.T) {
	rec := &recorder{}
	lm, err := callbacks.NewLearningRateMonitor("")
	if err != nil {
		t.Fatal(err)
	}
	cfg := trainer.Config{MaxSteps: 12, LogEveryNSteps: 4, Callbacks: []trainer.Callback{lm}, Loggers: []trainer.Logger{rec}, DefaultRootDir: t.TempDir()}
	cfg.Out = io.Discard
	cfg.EnableProgressBar = trainer.Bool(false)
	tr, _ := trainer.New(cfg)
	train, _ := regression(t)
	if err := tr.Fit(context.Background(), &linreg{sched: true}, train, nil); err != nil {
		t.Fatal(err)
	}
	// StepLR(0.05, every 4 steps, x0.5): the rate after step N is
	// 0.05 * 0.5^floor(N/4).
	got := map[int]float64{}
	for i, r := range rec.rows {
		if v, ok := r["lr-adam"]; ok {
			got[rec.steps[i]] = v
		}
	}
	want := map[int]float64{0: 0.05, 4: 0.025, 8: 0.0125, 12: 0.00625}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lr-adam by step = %v, want %v", got, want)
	}
	if rec.status != "success" || rec.hp["optimizer"] != "adam" {
		t.Errorf("status %q, hparams %v", rec.status, rec.hp)
	}
}

// A run resumed from a checkpoint saved mid-epoch at a step whose rate the
// monitor had logged starts the epoch again at that step: the rate is not
// logged a second time there.
func TestLearningRateMonitorResumedLogsEachStepOnce(t *testing.T) {
	dir := t.TempDir()
	run := func(ckpt string) map[int]int {
		t.Helper()
		rec := &recorder{}
		lm, err := callbacks.NewLearningRateMonitor("")
		if err != nil {
			t.Fatal(err)
		}
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, EveryNTrainSteps: 5, SaveTopK: -1, Filename: "{step}"})
		if err != nil {
			t.Fatal(err)
		}
		var opts []trainer.FitOption
		if ckpt != "" {
			opts = append(opts, trainer.FromCheckpoint(ckpt))
		}
		if _, err := fit(t, trainer.Config{MaxEpochs: 1, LogEveryNSteps: 5, Callbacks: []trainer.Callback{mc, lm}, Loggers: []trainer.Logger{rec}}, false, opts...); err != nil {
			t.Fatal(err)
		}
		n := map[int]int{}
		for i, r := range rec.rows {
			if _, ok := r["lr-adam"]; ok {
				n[rec.steps[i]]++
			}
		}
		return n
	}
	if first := run(""); first[10] != 1 {
		t.Fatalf("lr-adam logged %d times at step 10 in the first run, want 1 (by step: %v)", first[10], first)
	}
	resumed := run(filepath.Join(dir, "step=10.ckpt"))
	want := map[int]int{15: 1}
	if !reflect.DeepEqual(resumed, want) {
		t.Errorf("resumed from step 10: lr-adam rows by step %v, want %v (step 10's rate was logged before the checkpoint)", resumed, want)
	}
}

func TestGradientAccumulationScheduler(t *testing.T) {
	g, err := callbacks.NewGradientAccumulationScheduler(map[int]int{1: 4, 2: 8})
	if err != nil {
		t.Fatal(err)
	}
	for e, want := range []int{1, 4, 8, 8} {
		if got := g.AccumulateGradBatches(e); got != want {
			t.Errorf("epoch %d: %d, want %d", e, got, want)
		}
	}
	tr, err := fit(t, trainer.Config{MaxEpochs: 3, Callbacks: []trainer.Callback{g}}, false)
	if err != nil {
		t.Fatal(err)
	}
	// 16 batches an epoch: 16 steps, then 4, then 2.
	if s := tr.Stats().GlobalStep; s != 22 {
		t.Errorf("global step %d, want 22", s)
	}
}

// tick advances a fake clock by one second at each batch end.
type tick struct{ now *time.Time }

func (k tick) Name() string { return "tick" }
func (k tick) OnTrainBatchEnd(context.Context, *trainer.State) error {
	*k.now = k.now.Add(time.Second)
	return nil
}

func TestTimer(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	tm, err := callbacks.NewTimer(callbacks.TimerConfig{Duration: 10 * time.Second, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mc, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, EveryNTrainSteps: 4, Filename: "{step}"})
	tr, err := fit(t, trainer.Config{MaxEpochs: 5, Callbacks: []trainer.Callback{tick{&now}, tm, mc}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 10 || !strings.Contains(s.StoppedEarly, "Timer: the time budget of 10s is spent (10s elapsed)") {
		t.Errorf("stats %+v: want a stop after 10 one-second steps", s)
	}
	// Resumed from step 8 (8 s spent), a new Timer has 2 s left.
	tm2, _ := callbacks.NewTimer(callbacks.TimerConfig{Duration: 10 * time.Second, Now: clock})
	tr, err = fit(t, trainer.Config{MaxEpochs: 5, Callbacks: []trainer.Callback{tick{&now}, tm2}}, false, trainer.FromCheckpoint(filepath.Join(dir, "step=8.ckpt")))
	if err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 10 || tm2.Remaining() != 0 {
		t.Errorf("after resume: step %d, remaining %v; want 10 and 0", s.GlobalStep, tm2.Remaining())
	}
}

func TestModelSummary(t *testing.T) {
	var buf bytes.Buffer
	ms, err := callbacks.NewModelSummary(&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fit(t, trainer.Config{MaxSteps: 1, Callbacks: []trainer.Callback{ms}}, false); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"| Name |", "| fc   | Linear |      5 |", "5          Trainable params", "0          Non-trainable params", "0.000      Total estimated model params size (MB)"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	for n, want := range map[int]string{999: "999", 1234: "1.2 K", 11_200_000: "11.2 M", 3_000_000_000: "3.0 B"} {
		if got := callbacks.HumanCount(n); got != want {
			t.Errorf("HumanCount(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestProgressBarReplacesBuiltIn(t *testing.T) {
	now := time.Unix(0, 0)
	var bar, trOut bytes.Buffer
	pb, err := callbacks.NewProgressBar(callbacks.ProgressBarConfig{Out: &bar, Terminal: trainer.Bool(false), RefreshEvery: 8, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	cfg := trainer.Config{MaxEpochs: 1, LogEveryNSteps: 1, Seed: 5, Out: &trOut, EnableProgressBar: trainer.Bool(true), Callbacks: []trainer.Callback{tick{&now}, pb}, DefaultRootDir: t.TempDir()}
	tr, _ := trainer.New(cfg)
	train, val := regression(t)
	if err := tr.Fit(context.Background(), &linreg{}, train, val); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(bar.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "epoch 0/0 batch 8/16 step 8 loss=") || !strings.HasSuffix(lines[0], " 1.0 it/s eta 8s") ||
		!strings.HasPrefix(lines[1], "epoch 0/0 batch 16/16 step 16 loss=") || !strings.HasPrefix(lines[2], "validation epoch 0 step 16 val_loss=") {
		t.Errorf("progress lines:\n%s", bar.String())
	}
	if strings.Contains(trOut.String(), "train") {
		t.Errorf("the built-in progress still wrote:\n%s", trOut.String())
	}
}

// TestModelCheckpointValidationEveryFewEpochs: with CheckValEveryNEpoch 2 a
// ModelCheckpoint monitoring val_loss stopped Fit at the end of epoch 0
// ("val_loss was not logged"), a setting Lightning runs; and in epoch 2 it
// would have ranked the epoch's weights by epoch 1's val_loss. As
// Lightning's, it now saves in the epochs that validate only.
func TestModelCheckpointValidationEveryFewEpochs(t *testing.T) {
	dir := t.TempDir()
	mc, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Monitor: "val_loss", Dirpath: dir, SaveTopK: -1, Filename: "{epoch}-{val_loss:.6f}"})
	if _, err := fit(t, trainer.Config{MaxEpochs: 5, CheckValEveryNEpoch: 2, Callbacks: []trainer.Callback{mc}}, true); err != nil {
		t.Fatal(err)
	}
	got := files(t, dir)
	if len(got) != 2 || !strings.HasPrefix(got[0], "epoch=1-") || !strings.HasPrefix(got[1], "epoch=3-") {
		t.Errorf("checkpoints %v, want those of epochs 1 and 3, the epochs that validated", got)
	}
}

// A run resumed with the default run directories trains into a new
// version_N: the checkpoints of the run it resumes, in version_0, are that
// run's and stay, whichever ranking either run keeps.
func TestModelCheckpointResumedIntoANewRunDirectoryKeepsTheOldOnes(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  callbacks.ModelCheckpointConfig
	}{
		{"newest", callbacks.ModelCheckpointConfig{}},
		{"monitored", callbacks.ModelCheckpointConfig{Monitor: "val_loss", Filename: "{epoch}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			mc, err := callbacks.NewModelCheckpoint(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fit(t, trainer.Config{DefaultRootDir: root, MaxEpochs: 2, Callbacks: []trainer.Callback{mc}}, true); err != nil {
				t.Fatal(err)
			}
			first := mc.BestModelPath()
			if first == "" || !strings.Contains(first, "version_0") {
				t.Fatalf("first run's best checkpoint %q, want one in version_0", first)
			}
			mc2, _ := callbacks.NewModelCheckpoint(tc.cfg)
			if _, err := fit(t, trainer.Config{DefaultRootDir: root, MaxEpochs: 4, Callbacks: []trainer.Callback{mc2}}, true, trainer.FromCheckpoint(first)); err != nil {
				t.Fatal(err)
			}
			if _, err := trainer.VerifyCheckpoint(first); err != nil {
				t.Errorf("the first run's checkpoint after a resumed run in version_1: %v", err)
			}
			for p := range mc2.BestK() {
				if !strings.Contains(p, "version_1") {
					t.Errorf("the resumed run ranks %s, outside its run directory", p)
				}
			}
			if len(mc2.BestK()) != 1 || !strings.Contains(mc2.BestModelPath(), "version_1") {
				t.Errorf("resumed run keeps %v, best %q; want one checkpoint of version_1", mc2.BestK(), mc2.BestModelPath())
			}
		})
	}
}
