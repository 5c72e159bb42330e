package trainer_test

import (
	"context"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// scaled multiplies a Linear's output by a constant made as a PyTorch user
// writes `x / math.sqrt(d)`: a Go float64 (or, with f32, a float32); with
// matmul, it multiplies [batch, 1, 2] by [batch, 2, 1] with G.Mul, as
// PyTorch's @.
type scaled struct {
	f32, matmul bool
	fc          *nn.Linear
}

func (m *scaled) Configure(b *module.Builder) error {
	m.fc = nn.NewLinear(b, "fc", 4, 2)
	return nil
}

func (m *scaled) TrainingStep(s *module.Step) (*G.Node, error) {
	c := G.NewConstant(1 / math.Sqrt(4))
	if m.f32 {
		c = G.NewConstant(float32(0.5))
	}
	z := G.Must(G.HadamardProd(m.fc.Forward(s, s.Input("x")), c))
	if m.matmul {
		a := G.Must(G.Reshape(z, []int{s.BatchSize(), 1, 2}))
		b := G.Must(G.Reshape(z, []int{s.BatchSize(), 2, 1}))
		return G.Mean(G.Must(G.Mul(a, b)))
	}
	return nn.CrossEntropy(z, s.Input("y")), nil
}

// A constant of the other float type than the model's, the first thing a
// step that scales by 1/√d meets, stops Fit with an error that says which
// dtype meets which and how to make the constant, before Gorgonia's type
// unification message; G.Mul of two batches of matrices names
// G.BatchedMatMul.
func TestStepErrorsSayHow(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{4}}, {Name: "y"}}, [][]float32{make([]float32, 32), make([]float32, 8)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		precision   string
		f32, matmul bool
		want, also  string
	}{
		{"", false, false, `TrainingStep: a float64 value meets the model's float32 ones (Config.Precision "32"): make every constant of the step in the model's dtype, s.Dtype(): G.NewConstant(float32(v)) here, or switch on s.Dtype() in a model that runs in both: panicked: `, "cannot be unified"},
		{"64", true, false, `TrainingStep: a float32 value meets the model's float64 ones (Config.Precision "64"): make every constant of the step in the model's dtype, s.Dtype(): G.NewConstant(float64(v)) here, or switch on s.Dtype() in a model that runs in both: panicked: `, "cannot be unified"},
		{"", true, true, "TrainingStep: G.Mul multiplies vectors and matrices only: for PyTorch's @ (torch.matmul) over a batch of matrices, [batch, n, k] by [batch, k, m], use G.BatchedMatMul(a, b) (G.BatchedMatMul(q, k, false, true) for q·kᵀ): panicked: ", "Mul not yet implemented for a (8, 1, 2) b (8, 2, 1)"},
	} {
		loader, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8})
		if err != nil {
			t.Fatal(err)
		}
		cfg := quietConfig(1)
		cfg.Precision = c.precision
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = tr.Fit(context.Background(), &scaled{f32: c.f32, matmul: c.matmul}, loader, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.also) {
			t.Errorf("precision %q: Fit: %v\nwant an error containing %q", c.precision, err, c.want)
		}
	}
}
