package gradcheck_test

import (
	"fmt"
	"hash"
	"strings"
	"testing"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

func vec(dt tensor.Dtype, v ...float64) *tensor.Dense {
	t := tensor.New(tensor.Of(dt), tensor.WithShape(len(v)))
	for i, x := range v {
		if dt == tensor.Float32 {
			t.Float32s()[i] = float32(x)
		} else {
			t.Float64s()[i] = x
		}
	}
	return t
}

// Gorgonia's own elementwise multiply and tanh have correct gradients: the
// check must pass them in both dtypes.
func TestPassesCorrectGradients(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		r := gradcheck.Run(t, gradcheck.Case{
			Name:   fmt.Sprintf("tanh(a)*b/%v", dt),
			Inputs: []*tensor.Dense{vec(dt, 0.3, -0.7, 1.1), vec(dt, 0.5, 2, -1.5)},
			Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
				th, err := G.Tanh(in[0])
				if err != nil {
					return nil, err
				}
				return G.HadamardProd(th, in[1])
			},
		})
		if r.Checked != 6 || r.Skipped != 0 {
			t.Errorf("%v: checked %d, skipped %d; want 6 and 0", dt, r.Checked, r.Skipped)
		}
	}
}

// badOp computes 2x but claims its gradient is 3·g: the check must fail it
// and name the element.
type badOp struct{ grad bool }

func (op badOp) Arity() int { return 1 }
func (op badOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op badOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return in[0].(tensor.Shape).Clone(), nil
}
func (op badOp) ReturnsPtr() bool      { return false }
func (op badOp) CallsExtern() bool     { return false }
func (op badOp) OverwritesInput() int  { return -1 }
func (op badOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "bad%v", op.grad) }
func (op badOp) Hashcode() uint32      { return map[bool]uint32{false: 1, true: 2}[op.grad] }
func (op badOp) String() string        { return "bad" }
func (op badOp) DiffWRT(int) []bool    { return []bool{true} }
func (op badOp) Do(v ...G.Value) (G.Value, error) {
	k := 2.0
	if op.grad {
		k = 3
	}
	x := v[0].(*tensor.Dense)
	y := x.Clone().(*tensor.Dense)
	for i := range y.Float64s() {
		y.Float64s()[i] *= k
	}
	return y, nil
}
func (op badOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(badOp{grad: true}, grad)
	return G.Nodes{d}, err
}

func TestFailsWrongGradient(t *testing.T) {
	_, err := gradcheck.Check(gradcheck.Case{
		Name:   "bad",
		Inputs: []*tensor.Dense{vec(tensor.Float64, 1, 2, 3)},
		Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
			return G.ApplyOp(badOp{}, in[0])
		},
	})
	if err == nil || !strings.Contains(err.Error(), "gradient mismatch at input0 element") {
		t.Fatalf("a wrong gradient passed: err = %v", err)
	}
}

// |x| has a kink at 0: an element within ε of it is skipped, and too many
// skipped elements fail the case.
func TestKinks(t *testing.T) {
	abs := func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return G.Abs(in[0]) }
	r, err := gradcheck.Check(gradcheck.Case{Name: "abs", Build: abs, MaxSkipFrac: 0.5,
		Inputs: []*tensor.Dense{vec(tensor.Float64, 3e-7, 0.5, -0.25, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Skipped != 1 || r.Checked != 3 {
		t.Fatalf("checked %d, skipped %d; want 3 and 1", r.Checked, r.Skipped)
	}
	_, err = gradcheck.Check(gradcheck.Case{Name: "abs", Build: abs,
		Inputs: []*tensor.Dense{vec(tensor.Float64, 3e-7, -2e-7, 1)}})
	if err == nil || !strings.Contains(err.Error(), "skipped as kinks") {
		t.Fatalf("two kinks in three elements passed: %v", err)
	}
}

func TestBadCases(t *testing.T) {
	for _, c := range []struct {
		name string
		c    gradcheck.Case
		want string
	}{
		{"no inputs", gradcheck.Case{}, "needs Inputs and Build"},
		{"mixed dtypes", gradcheck.Case{Inputs: []*tensor.Dense{vec(tensor.Float32, 1), vec(tensor.Float64, 1)},
			Build: func(*G.ExprGraph, []*G.Node) (*G.Node, error) { return nil, nil }}, "use one dtype"},
		{"nothing to check", gradcheck.Case{Inputs: []*tensor.Dense{vec(tensor.Float64, 1)}, NoGrad: []int{0},
			Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return G.Square(in[0]) }}, "no input to differentiate"},
		{"bound leaf without a dense value", gradcheck.Case{BuildBound: func(g *G.ExprGraph) (*G.Node, []*G.Node, error) {
			x := G.NewScalar(g, tensor.Float64, G.WithName("x"), G.WithValue(2.0))
			y, err := G.Square(x)
			return y, []*G.Node{x}, err
		}}, "leaf 0 (x) is bound to a *gorgonia.F64"},
	} {
		_, err := gradcheck.Check(c.c)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

// BuildBound differentiates leaves the caller bound to its own memory (as a
// parameter store does), perturbs them in place and restores them.
func TestBuildBound(t *testing.T) {
	w := vec(tensor.Float64, 0.5, -1, 2)
	x := vec(tensor.Float64, 1, 2, 3)
	r := gradcheck.Run(t, gradcheck.Case{Name: "bound", BuildBound: func(g *G.ExprGraph) (*G.Node, []*G.Node, error) {
		wn := G.NewVector(g, tensor.Float64, G.WithShape(3), G.WithName("w"), G.WithValue(w))
		xn := G.NewVector(g, tensor.Float64, G.WithShape(3), G.WithName("x"), G.WithValue(x))
		th, err := G.Tanh(wn)
		if err != nil {
			return nil, nil, err
		}
		y, err := G.HadamardProd(th, xn)
		return y, []*G.Node{wn}, err
	}})
	if r.Checked != 3 {
		t.Fatalf("checked %d elements, want 3", r.Checked)
	}
	for i, want := range []float64{0.5, -1, 2} {
		if w.Float64s()[i] != want {
			t.Fatalf("w[%d] = %v after the check, want %v restored", i, w.Float64s()[i], want)
		}
	}
}
