package ops

import (
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

func linearRef(x, w, b []float64, batch, in, out int, relu bool) []float64 {
	y := make([]float64, batch*out)
	for r := 0; r < batch; r++ {
		for j := 0; j < out; j++ {
			s := 0.0
			if b != nil {
				s = b[j]
			}
			for k := 0; k < in; k++ {
				s += x[r*in+k] * w[j*in+k]
			}
			if relu && s < 0 {
				s = 0
			}
			y[r*out+j] = s
		}
	}
	return y
}

// weightT is a Linear weight [out, in] holding the transpose of randT's
// [in, out] draw: the same function of the inputs the gradient checks were
// tuned on (clear of ReLU kinks) before weights moved to PyTorch's layout.
func weightT(dt tensor.Dtype, seed uint64, in, out int) *tensor.Dense {
	src := vals(randT(dt, seed, -1, 1, in, out))
	return fromF64(dt, transpose(src, in, out), out, in)
}

// transpose turns a row-major [rows, cols] matrix into [cols, rows].
func transpose(v []float64, rows, cols int) []float64 {
	out := make([]float64, len(v))
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			out[c*rows+r] = v[r*cols+c]
		}
	}
	return out
}

func TestLinearForward(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range []struct {
			batch, in, out int
			bias, relu     bool
		}{{1, 1, 1, true, false}, {3, 5, 7, true, true}, {4, 9, 2, false, false}, {2, 3, 4, false, true}} {
			t.Run(fmt.Sprintf("%v/%+v", dt, c), func(t *testing.T) {
				x := randT(dt, 1, -1, 1, c.batch, c.in)
				w := randT(dt, 2, -1, 1, c.out, c.in)
				b := randT(dt, 3, -1, 1, c.out)
				var bv []float64
				ins := []*tensor.Dense{x, w}
				if c.bias {
					bv = vals(b)
					ins = append(ins, b)
				}
				got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
					var bn *G.Node
					if c.bias {
						bn = in[2]
					}
					return Linear(in[0], in[1], bn, LinearOpts{ReLU: c.relu})
				}, ins...)
				assertClose(t, "y", got, linearRef(vals(x), vals(w), bv, c.batch, c.in, c.out, c.relu), tol(dt))
			})
		}
	}
}

func TestLinearGrad(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range []struct {
			batch, in, out int
			bias, relu     bool
		}{{1, 1, 1, true, false}, {3, 5, 7, true, true}, {4, 9, 2, false, false}, {1, 6, 3, true, true}} {
			t.Run(fmt.Sprintf("%v/%+v", dt, c), func(t *testing.T) {
				ins := []*tensor.Dense{randT(dt, 1, -1, 1, c.batch, c.in), weightT(dt, 2, c.in, c.out)}
				if c.bias {
					ins = append(ins, randT(dt, 3, -1, 1, c.out))
				}
				check(t, gradcheck.Case{Name: "Linear", Inputs: ins, Seed: 4,
					Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
						var bn *G.Node
						if c.bias {
							bn = in[2]
						}
						return Linear(in[0], in[1], bn, LinearOpts{ReLU: c.relu})
					}})
			})
		}
	}
}

// NoInputGrad must leave the input out of the gradient graph entirely (no
// wasted multiply) while the weight and bias gradients stay right.
func TestLinearNoInputGrad(t *testing.T) {
	for _, dt := range dtypes {
		ins := []*tensor.Dense{randT(dt, 1, -1, 1, 3, 4), weightT(dt, 2, 4, 5), randT(dt, 3, -1, 1, 5)}
		check(t, gradcheck.Case{Name: "Linear/NoInputGrad", Inputs: ins, NoGrad: []int{0}, Seed: 5,
			Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
				return Linear(in[0], in[1], in[2], LinearOpts{ReLU: true, NoInputGrad: true})
			}})
		g := G.NewGraph()
		x := node(g, ins[0], "x")
		w := node(g, ins[1], "w")
		y, err := Linear(x, w, nil, LinearOpts{NoInputGrad: true})
		if err != nil {
			t.Fatal(err)
		}
		loss, _ := SumAll(y)
		if _, err := G.Grad(loss, w); err != nil {
			t.Fatal(err)
		}
		for _, n := range g.AllNodes() {
			if _, ok := n.Op().(*linearGradInputOp); ok {
				t.Fatalf("%v: NoInputGrad still built %v", dt, n)
			}
		}
	}
}

func TestLinearShapeErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 3), G.WithName("x"))
	w := G.NewMatrix(g, tensor.Float32, G.WithShape(5, 4), G.WithName("w"))
	b := G.NewVector(g, tensor.Float32, G.WithShape(4), G.WithName("b"))
	w64 := G.NewMatrix(g, tensor.Float64, G.WithShape(5, 3), G.WithName("w64"))
	if _, err := Linear(x, w, nil, LinearOpts{}); err == nil || err.Error() != "Linear input has shape (2, 3), want [batch, 4] to match weight (5, 4) ([out, in])" {
		t.Errorf("input/weight mismatch: %v", err)
	}
	w2 := G.NewMatrix(g, tensor.Float32, G.WithShape(5, 3), G.WithName("w2"))
	if _, err := Linear(x, w2, b, LinearOpts{}); err == nil || err.Error() != "Linear bias has shape (4), want [5] to match weight (5, 3) ([out, in])" {
		t.Errorf("bias mismatch: %v", err)
	}
	if _, err := Linear(x, w64, nil, LinearOpts{}); err == nil {
		t.Error("mixed dtypes accepted")
	}
}

// TestLinearWideSplitsColumns: a Linear layer large enough for gemmCols
// (columns in blocks between the image workers; sizes not multiples of
// the block) gives, under SetDeterministic, the same bits on one worker
// and on three, for the output and the input and weight gradients; and
// it matches a plain float64 computation (on three workers without
// SetDeterministic, one call on one).
func TestLinearWideSplitsColumns(t *testing.T) {
	defer func(w func() int) { imageWorkers = w }(imageWorkers)
	const batch, in, out = 8, 2048, 1100 // each multiply 18M multiply-adds
	x := randT(tensor.Float32, 1, -1, 1, batch, in)
	w := randT(tensor.Float32, 2, -1, 1, out, in)
	b := randT(tensor.Float32, 3, -1, 1, out)
	r := randT(tensor.Float32, 4, -1, 1, batch, out)
	run := func(workers int) (y, dx, dw, db []float64) {
		SetImageWorkers(workers)
		return layerGrads(t, x, w, b, r, func(x, w, b *G.Node) (*G.Node, error) { return Linear(x, w, b, LinearOpts{}) })
	}
	release := HoldDeterministic()
	y1, dx1, dw1, _ := run(1)
	y3, dx3, dw3, _ := run(3)
	release()
	sameBits(t, "output", y3, y1)
	sameBits(t, "input gradient", dx3, dx1)
	sameBits(t, "weight gradient", dw3, dw1)
	xv, wv, bv, rv := vals(x), vals(w), vals(b), vals(r)
	for _, workers := range []int{1, 3} {
		y, dx, dw, _ := run(workers)
		assertClose(t, fmt.Sprintf("output, %d workers", workers), y, y1, 2e-4)
		assertClose(t, fmt.Sprintf("input gradient, %d workers", workers), dx, dx1, 2e-4)
		assertClose(t, fmt.Sprintf("weight gradient, %d workers", workers), dw, dw1, 2e-4)
	}
	for i := 0; i < batch; i++ {
		for o := 0; o < out; o++ {
			s := bv[o]
			for k := 0; k < in; k++ {
				s += xv[i*in+k] * wv[o*in+k]
			}
			if d := math.Abs(y1[i*out+o] - s); d > 1e-3 {
				t.Fatalf("y[%d][%d] = %v, want %v", i, o, y1[i*out+o], s)
			}
		}
		for k := 0; k < in; k += 7 {
			var s float64
			for o := 0; o < out; o++ {
				s += rv[i*out+o] * wv[o*in+k]
			}
			if d := math.Abs(dx1[i*in+k] - s); d > 1e-3 {
				t.Fatalf("dx[%d][%d] = %v, want %v", i, k, dx1[i*in+k], s)
			}
		}
	}
	for o := 0; o < out; o += 5 {
		for k := 0; k < in; k += 3 {
			var s float64
			for i := 0; i < batch; i++ {
				s += rv[i*out+o] * xv[i*in+k]
			}
			if d := math.Abs(dw1[o*in+k] - s); d > 1e-4 {
				t.Fatalf("dw[%d][%d] = %v, want %v", o, k, dw1[o*in+k], s)
			}
		}
	}
	SetImageWorkers(0)
}
