package nn_test

import (
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn"
)

// Counts as ops.ClassCounts lays them out: [top-k correct, confusion matrix
// rows true, columns predicted]. Class 3 occurs neither as a label nor as a
// prediction: it is left out of the macro means, and its ratios are 0.
func TestClassMetricsValues(t *testing.T) {
	counts := []float64{7,
		4, 1, 0, 0,
		0, 2, 1, 0,
		1, 1, 2, 0,
		0, 0, 0, 0,
	}
	out := map[string]float64{}
	nn.ClassMetrics{TopK: 3, PerClass: true, ConfusionMatrix: true}.Values("v", counts, out)
	// Hand-computed: tp 4 2 2 0; predictions per class 5 4 3 0; labels 5 3 4 0.
	want := map[string]float64{
		"v_acc": 8.0 / 12, "v_acc_top3": 7.0 / 12,
		"v_precision_class0": 4.0 / 5, "v_precision_class1": 2.0 / 4, "v_precision_class2": 2.0 / 3, "v_precision_class3": 0,
		"v_recall_class0": 4.0 / 5, "v_recall_class1": 2.0 / 3, "v_recall_class2": 2.0 / 4, "v_recall_class3": 0,
		"v_f1_class0": 8.0 / 10, "v_f1_class1": 4.0 / 7, "v_f1_class2": 4.0 / 7, "v_f1_class3": 0,
		"v_precision": (4.0/5 + 2.0/4 + 2.0/3) / 3, "v_recall": (4.0/5 + 2.0/3 + 2.0/4) / 3, "v_f1": (8.0/10 + 4.0/7 + 4.0/7) / 3,
		"v_confmat_0_1": 1, "v_confmat_2_0": 1, "v_confmat_3_3": 0, "v_confmat_2_2": 2,
	}
	for k, w := range want {
		if got, ok := out[k]; !ok || math.Abs(got-w) > 1e-15 {
			t.Errorf("%s = %v (logged %v), want %v", k, got, ok, w)
		}
	}
	if n := len(out); n != 5+3*4+16 {
		t.Errorf("%d values logged, want %d: %v", n, 5+3*4+16, out)
	}
	// Without the matrix the counts are compact (true positives, predictions
	// and labels per class) and give the same values.
	compact := map[string]float64{}
	nn.ClassMetrics{TopK: 3, PerClass: true}.Values("v", []float64{7, 4, 2, 2, 0, 5, 4, 3, 0, 5, 3, 4, 0}, compact)
	if len(compact) != 5+3*4 {
		t.Errorf("compact: %d values logged, want %d: %v", len(compact), 5+3*4, compact)
	}
	for k, v := range compact {
		if w, ok := want[k]; !ok || math.Abs(v-w) > 1e-15 {
			t.Errorf("compact: %s = %v, want %v (in want: %v)", k, v, w, ok)
		}
	}
	cm, err := nn.ConfusionMatrixOf(out, "v")
	if err != nil {
		t.Fatal(err)
	}
	if len(cm) != 4 || cm[0][0] != 4 || cm[1][2] != 1 || cm[2][1] != 1 {
		t.Errorf("confusion matrix %v", cm)
	}
	if _, err := nn.ConfusionMatrixOf(out, "val"); err == nil || !strings.Contains(err.Error(), `no confusion matrix logged under "val"`) {
		t.Errorf("missing matrix: %v", err)
	}
}

// The losses' nn forms pass their settings through: a summed Huber loss
// with δ = 2 and a BCE with per-class pos_weight against PyTorch 1.13's
// F.huber_loss(x, y, delta=2, reduction="sum") and
// F.binary_cross_entropy_with_logits(x, t, pos_weight=[2, 0.5, 3]).
func TestLossOptions(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		g := G.NewGraph()
		mk := func(name string, v []float64) *G.Node {
			d := tensor.New(tensor.Of(dt), tensor.WithShape(2, 3))
			for i, x := range v {
				if dt == tensor.Float32 {
					d.Float32s()[i] = float32(x)
				} else {
					d.Float64s()[i] = x
				}
			}
			return G.NewTensor(g, dt, 2, G.WithShape(2, 3), G.WithValue(d), G.WithName(name))
		}
		x := mk("x", []float64{0.5, -1.25, 2.0, 3.5, 0.0, -0.75})
		y := mk("y", []float64{1.0, -0.5, 0.25, 0.0, 0.1, -2.0})
		tg := mk("t", []float64{1.0, 0.0, 1.0, 0.0, 1.0, 0.3})
		huber := nn.HuberLoss(x, y, 2, nn.WithReduction(nn.ReduceSum))
		bce := nn.BCEWithLogitsLoss(x, tg, nn.PosWeight(2, 0.5, 3))
		none := nn.MSELoss(x, y, nn.WithReduction(nn.ReduceNone))
		m := G.NewTapeMachine(g)
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		tol := map[tensor.Dtype]float64{tensor.Float32: 1e-6, tensor.Float64: 1e-14}[dt]
		for _, c := range []struct {
			n    *G.Node
			want float64
		}{{huber, 7.72375}, {bce, 1.125197450195156}} {
			got := toF64(c.n.Value())
			if math.Abs(got[0]-c.want) > tol*c.want {
				t.Errorf("%v %v = %v, want %v", dt, c.n, got[0], c.want)
			}
		}
		if !none.Shape().Eq(tensor.Shape{2, 3}) {
			t.Errorf("MSELoss with ReduceNone has shape %v, want (2, 3)", none.Shape())
		}
		m.Close()
	}
	g := G.NewGraph()
	a := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3), G.WithName("a"))
	b := G.NewVector(g, tensor.Float64, G.WithShape(6), G.WithName("b"))
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(error).Error(), "nn.L1Loss: input has shape (2, 3) but target has (6)") {
			t.Errorf("mismatched shapes: panic %v", r)
		}
	}()
	nn.L1Loss(a, b)
}

func toF64(v G.Value) []float64 {
	switch d := v.Data().(type) {
	case float32:
		return []float64{float64(d)}
	case float64:
		return []float64{d}
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	case []float64:
		return d
	}
	return nil
}
