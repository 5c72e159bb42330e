package trainer_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// The classification data of the metric tests: 12 rows of 3 classes whose
// logits are fixed (the largest at pred, the second at second), so every
// metric is known. Rows alternate between the 2 ranks of a distributed
// evaluation (rank 0 gets the even rows), which see different classes.
var (
	clsLabels = []float32{0, 2, 0, 2, 0, 2, 0, 1, 1, 2, 0, 1}
	clsPreds  = []int{0, 2, 0, 1, 0, 2, 1, 2, 1, 0, 0, 1}
	clsSecond = []int{1, 0, 2, 2, 1, 1, 0, 1, 0, 1, 2, 0}
)

// Values computed from the confusion matrix below (rows true, columns
// predicted) by torchmetrics' definitions, in float64:
// precision = tp/(tp+fp), recall = tp/(tp+fn), F1 = 2tp/(2tp+fp+fn), macro
// = mean over the classes present. Rank 0's rows alone give F1 0.7777…,
// rank 1's 0.3571…: their mean, 0.5674…, is what averaging per-rank values
// would report.
var (
	clsConfusion = [][]float64{{4, 1, 0}, {0, 2, 1}, {1, 1, 2}}
	clsWant      = map[string]float64{
		"val_acc":              8.0 / 12,
		"val_acc_top2":         11.0 / 12,
		"val_precision":        0.6555555555555556,
		"val_recall":           0.6555555555555556,
		"val_f1":               0.6476190476190476,
		"val_precision_class0": 0.8, "val_precision_class1": 0.5, "val_precision_class2": 2.0 / 3,
		"val_recall_class0": 0.8, "val_recall_class1": 2.0 / 3, "val_recall_class2": 0.5,
		"val_f1_class0": 0.8, "val_f1_class1": 0.5714285714285714, "val_f1_class2": 0.5714285714285714,
	}
)

func clsData(t testing.TB, rows []int) *data.InMemory {
	t.Helper()
	var x, y []float32
	for _, i := range rows {
		z := make([]float32, 3)
		z[clsPreds[i]], z[clsSecond[i]] = 3, 1
		x = append(x, z...)
		y = append(y, clsLabels[i])
	}
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{3}}, {Name: "y"}}, [][]float32{x, y})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func rowsOf(lo, step int) []int {
	var r []int
	for i := lo; i < len(clsLabels); i += step {
		r = append(r, i)
	}
	return r
}

// fixedClassifier's metrics see the data's logits as they are; its loss
// scales them by a learnt vector so that training has something to do.
type fixedClassifier struct{}

var clsMetrics = nn.ClassMetrics{TopK: 2, PerClass: true, ConfusionMatrix: true}

func (fixedClassifier) Configure(b *module.Builder) error {
	b.Param("w", []int{3}, module.Ones())
	return nil
}

func (fixedClassifier) TrainingStep(s *module.Step) (*G.Node, error) {
	x, y := s.Input("x"), s.Input("y")
	clsMetrics.Log(s, "train", x, y, module.OnStep(false), module.OnEpoch(true))
	z := G.Must(G.BroadcastHadamardProd(x, s.Param("w"), nil, []byte{0}))
	return nn.CrossEntropy(z, y), nil
}

func (fixedClassifier) ValidationStep(s *module.Step) error {
	clsMetrics.Log(s, "val", s.Input("x"), s.Input("y"))
	return nil
}

func (fixedClassifier) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	return o, nil, err
}

func clsLoader(t testing.TB, ds data.Dataset, bs int) *data.Loader {
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func clsConfig(t testing.TB) trainer.Config {
	return trainer.Config{MaxEpochs: 1, Out: io.Discard, EnableProgressBar: trainer.Bool(false),
		DefaultRootDir: t.TempDir(), HandleSignals: trainer.Bool(false)}
}

func validate(t *testing.T, cfg trainer.Config, ds data.Dataset, bs int) map[string]float64 {
	t.Helper()
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Teardown(context.Background())
	m, err := tr.Validate(context.Background(), fixedClassifier{}, clsLoader(t, ds, bs))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func checkCls(t *testing.T, what string, got map[string]float64, prefix string) {
	t.Helper()
	for k, want := range clsWant {
		k = prefix + k[len("val"):]
		v, ok := got[k]
		if !ok {
			t.Errorf("%s: %s not logged (got %v)", what, k, got)
		} else if math.Abs(v-want) > 1e-12 {
			t.Errorf("%s: %s = %.12g, want %.12g", what, k, v, want)
		}
	}
	if !clsMetrics.ConfusionMatrix {
		return
	}
	cm, err := nn.ConfusionMatrixOf(got, prefix)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for i := range clsConfusion {
		for j := range clsConfusion[i] {
			if cm[i][j] != clsConfusion[i][j] {
				t.Fatalf("%s: confusion matrix %v, want %v", what, cm, clsConfusion)
			}
		}
	}
}

// On one device, in batches of 5 (whose own F1s differ), the metrics are
// those of the whole data.
func TestClassMetricsOneDevice(t *testing.T) {
	checkCls(t, "one device", validate(t, clsConfig(t), clsData(t, rowsOf(0, 1)), 5), "val")
}

// Two ranks whose shards hold different classes report the whole data's
// values, not the mean of their own: their counts are summed first.
func TestClassMetricsAcrossRanks(t *testing.T) {
	all := clsData(t, rowsOf(0, 1))
	r0 := validate(t, clsConfig(t), clsData(t, rowsOf(0, 2)), 4)["val_f1"]
	r1 := validate(t, clsConfig(t), clsData(t, rowsOf(1, 2)), 4)["val_f1"]
	if mean := (r0 + r1) / 2; math.Abs(mean-clsWant["val_f1"]) < 0.05 {
		t.Fatalf("the ranks' own F1s %v and %v average to %v, too close to the whole data's %v for this test to tell them apart", r0, r1, mean, clsWant["val_f1"])
	}

	for _, matrix := range []bool{true, false} {
		clsMetrics.ConfusionMatrix = matrix
		t.Run(fmt.Sprintf("matrix=%v", matrix), func(t *testing.T) { acrossRanks(t, all) })
	}
	clsMetrics.ConfusionMatrix = true
}

func acrossRanks(t *testing.T, all data.Dataset) {
	t.Run("dp", func(t *testing.T) {
		cfg := clsConfig(t)
		cfg.Strategy, cfg.Devices = "dp", 2
		checkCls(t, "dp", validate(t, cfg, all, 4), "val")
	})

	t.Run("ddp", func(t *testing.T) {
		group, err := inproc.NewGroup(2)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]map[string]float64, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			s, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
			if err != nil {
				t.Fatal(err)
			}
			cfg := clsConfig(t)
			cfg.StrategyImpl = s
			tr, err := trainer.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[r], errs[r] = tr.Validate(context.Background(), fixedClassifier{}, clsLoader(t, all, 4))
				if err := tr.Teardown(context.Background()); err != nil && errs[r] == nil {
					errs[r] = err
				}
			}()
		}
		wg.Wait()
		for r := range 2 {
			if errs[r] != nil {
				t.Fatalf("rank %d: %v", r, errs[r])
			}
			checkCls(t, "ddp rank "+string(rune('0'+r)), got[r], "val")
		}
	})
}

// Training metrics logged on epoch are summed over the epoch's batches
// (of 4 rows, whose own values differ) and reported by Fit.
func TestClassMetricsFit(t *testing.T) {
	all := clsData(t, rowsOf(0, 1))
	for _, c := range []struct {
		name    string
		devices int
		strat   string
	}{{"single", 1, ""}, {"dp", 2, "dp"}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := clsConfig(t)
			cfg.Strategy, cfg.Devices = c.strat, c.devices
			tr, err := trainer.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Teardown(context.Background())
			if err := tr.Fit(context.Background(), fixedClassifier{}, clsLoader(t, all, 4), clsLoader(t, all, 6)); err != nil {
				t.Fatal(err)
			}
			checkCls(t, "train", tr.Metrics(), "train")
			checkCls(t, "val", tr.Metrics(), "val")
		})
	}
}

// A run resumed from a checkpoint saved mid-epoch keeps the counts of the
// batches before it: the epoch's training metrics are the whole data's.
func TestClassMetricsResumeMidEpoch(t *testing.T) {
	all := clsData(t, rowsOf(0, 1))
	sv := &saver{dir: t.TempDir(), when: map[string]func(*trainer.State) bool{"batch": func(s *trainer.State) bool { return s.GlobalStep == 2 }}}
	fit := func(ckpt string, cbs ...trainer.Callback) *trainer.Trainer {
		cfg := clsConfig(t)
		cfg.Callbacks = cbs
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var opts []trainer.FitOption
		if ckpt != "" {
			opts = append(opts, trainer.FromCheckpoint(ckpt))
		}
		if err := tr.Fit(context.Background(), fixedClassifier{}, clsLoader(t, all, 4), nil, opts...); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	fit("", sv)
	if len(sv.paths) != 1 {
		t.Fatalf("saved %v, want one checkpoint at step 2 of 3", sv.paths)
	}
	tr := fit(sv.paths[0])
	if got := tr.Stats().GlobalStep; got != 3 {
		t.Fatalf("resumed run ended at step %d, want 3", got)
	}
	checkCls(t, "resumed train", tr.Metrics(), "train")
}

type badTopK struct {
	fixedClassifier
	k int
}

func (m badTopK) ValidationStep(s *module.Step) error {
	nn.ClassMetrics{TopK: m.k}.Log(s, "val", s.Input("x"), s.Input("y"))
	return nil
}

// A top-k beyond the classes, below 0, or 1 (which would log nothing
// more than val_acc) is an error of the step that names the metric and
// the value, not a panic or a silently missing metric.
func TestClassMetricsBadTopK(t *testing.T) {
	for _, c := range []struct {
		k    int
		want string
	}{
		{5, `nn.ClassMetrics "val": ClassCounts: topK is 5 but the logits (4, 3) have 3 classes`},
		{1, `nn.ClassMetrics "val": TopK is 1: want 0 (top-1 only: val_acc is the top-1 accuracy) or k ≥ 2`},
		{-1, `nn.ClassMetrics "val": TopK is -1: want 0`},
	} {
		tr, err := trainer.New(clsConfig(t))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tr.Validate(context.Background(), badTopK{k: c.k}, clsLoader(t, clsData(t, rowsOf(0, 1)), 4))
		tr.Teardown(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate with TopK %d of 3 classes: %v, want it to contain %q", c.k, err, c.want)
		}
	}
}

// Under ddp, training metrics logged on epoch (not SyncDist) are still
// summed across the ranks before their values are derived.
func TestClassMetricsFitDDP(t *testing.T) {
	all := clsData(t, rowsOf(0, 1))
	group, err := inproc.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]*trainer.Trainer, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		s, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		cfg := clsConfig(t)
		cfg.StrategyImpl = s
		if trs[r], err = trainer.New(cfg); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = trs[r].Fit(context.Background(), fixedClassifier{}, clsLoader(t, all, 4), clsLoader(t, all, 5))
			if err := trs[r].Teardown(context.Background()); err != nil && errs[r] == nil {
				errs[r] = err
			}
		}()
	}
	wg.Wait()
	for r := range 2 {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		checkCls(t, fmt.Sprintf("ddp rank %d train", r), trs[r].Metrics(), "train")
		checkCls(t, fmt.Sprintf("ddp rank %d val", r), trs[r].Metrics(), "val")
	}
}
