package ops

import (
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

func ceRef(z, labels, w []float64, c int) float64 {
	b := len(labels)
	var loss, wsum float64
	for i := 0; i < b; i++ {
		row := z[i*c : (i+1)*c]
		var s float64
		for _, v := range row {
			s += math.Exp(v)
		}
		wi := 1.0
		if w != nil {
			wi = w[i]
		}
		loss += wi * (math.Log(s) - row[int(labels[i])])
		wsum += wi
	}
	return loss / wsum
}

func TestSoftmaxCrossEntropyForward(t *testing.T) {
	for _, dt := range dtypes {
		z := randT(dt, 1, -3, 3, 5, 4)
		l := labelsT(dt, 2, 5, 4)
		w := fromF64(dt, []float64{1, 0, 2, 1, 0.5}, 5)
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
			return SoftmaxCrossEntropy(in[0], in[1], nil)
		}, z, l)
		assertClose(t, "loss", got, []float64{ceRef(vals(z), vals(l), nil, 4)}, tol(dt))
		got = run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
			return SoftmaxCrossEntropy(in[0], in[1], in[2])
		}, z, l, w)
		assertClose(t, "weighted loss", got, []float64{ceRef(vals(z), vals(l), vals(w), 4)}, tol(dt))
	}
}

// Logits of ±1000 overflow a naive exp; the stable form gives the exact loss.
func TestSoftmaxCrossEntropyStable(t *testing.T) {
	for _, dt := range dtypes {
		z := fromF64(dt, []float64{1000, 0, -1000, -1000, 1000, 999}, 2, 3)
		l := fromF64(dt, []float64{0, 2}, 2)
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
			return SoftmaxCrossEntropy(in[0], in[1], nil)
		}, z, l)
		// row 0: -log softmax = log(1 + e^-1000 + ...) ≈ 0; row 1: log(1 + e) ≈ 1.3132617
		want := (0 + math.Log(1+math.E)) / 2
		assertClose(t, "loss", got, []float64{want}, tol(dt))
	}
}

func TestSoftmaxCrossEntropyGrad(t *testing.T) {
	for _, dt := range dtypes {
		for _, s := range [][2]int{{1, 1}, {1, 3}, {4, 10}, {7, 5}} {
			for _, weighted := range []bool{false, true} {
				ins := []*tensor.Dense{randT(dt, 1, -2, 2, s[0], s[1]), labelsT(dt, 2, s[0], s[1])}
				noGrad := []int{1}
				if weighted {
					ins = append(ins, randT(dt, 3, 0, 2, s[0]))
					noGrad = append(noGrad, 2)
				}
				check(t, gradcheck.Case{Name: fmt.Sprintf("SoftmaxCE%v/w=%v/%v", s, weighted, dt), Inputs: ins, NoGrad: noGrad, Seed: 3,
					Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
						var w *G.Node
						if weighted {
							w = in[2]
						}
						return SoftmaxCrossEntropy(in[0], in[1], w)
					}})
			}
		}
	}
}

func TestSoftmaxCrossEntropyBadLabels(t *testing.T) {
	for _, c := range []struct {
		label float64
		want  string
	}{{4, "label 4 at row 1 is not a class index in [0, 4)"}, {-1, "label -1 at row 1"}, {1.5, "label 1.5 at row 1"}} {
		g := G.NewGraph()
		z := node(g, randT(tensor.Float32, 1, -1, 1, 2, 4), "z")
		l := node(g, fromF64(tensor.Float32, []float64{0, c.label}, 2), "l")
		loss, err := SoftmaxCrossEntropy(z, l, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := G.NewTapeMachine(g)
		err = m.RunAll()
		m.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("label %v: err = %v, want it to contain %q", c.label, err, c.want)
		}
		_ = loss
	}
	g := G.NewGraph()
	z := G.NewMatrix(g, tensor.Float32, G.WithShape(3, 4))
	l := G.NewVector(g, tensor.Float32, G.WithShape(2))
	if _, err := SoftmaxCrossEntropy(z, l, nil); err == nil || err.Error() != "CrossEntropy labels have shape (2), want [3] (one class index per row of logits (3, 4))" {
		t.Errorf("labels shape: %v", err)
	}
}

// A batch whose weights are all 0 (a fully padded batch) has loss 0 and no
// gradient, not NaN.
func TestSoftmaxCrossEntropyAllMasked(t *testing.T) {
	got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
		return SoftmaxCrossEntropy(in[0], in[1], in[2])
	}, randT(tensor.Float64, 1, -1, 1, 2, 3), fromF64(tensor.Float64, []float64{0, 1}, 2), fromF64(tensor.Float64, []float64{0, 0}, 2))
	assertClose(t, "loss", got, []float64{0}, 0)
}

func TestLogSoftmax(t *testing.T) {
	for _, dt := range dtypes {
		z := fromF64(dt, []float64{1, 2, 3, 1000, 1000, -1000}, 2, 3)
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return LogSoftmax(in[0]) }, z)
		l0 := math.Log(math.Exp(1) + math.Exp(2) + math.Exp(3))
		want := []float64{1 - l0, 2 - l0, 3 - l0, -math.Log(2), -math.Log(2), -2000 - math.Log(2)}
		assertClose(t, "logsoftmax", got, want, tol(dt))
		for _, s := range [][]int{{1, 1}, {3, 5}, {2, 3, 4}} {
			check(t, gradcheck.Case{Name: fmt.Sprintf("LogSoftmax%v/%v", s, dt), Seed: 5,
				Inputs: []*tensor.Dense{randT(dt, 4, -2, 2, s...)},
				Build:  func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return LogSoftmax(in[0]) }})
		}
	}
}

func TestAccuracy(t *testing.T) {
	for _, dt := range dtypes {
		z := fromF64(dt, []float64{
			0.1, 0.9, 0, // argmax 1
			2, 1, 0, // argmax 0
			1, 1, 0, // tie: first, 0
			0, 0, 5, // argmax 2
		}, 4, 3)
		l := fromF64(dt, []float64{1, 2, 0, 2}, 4)
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return Accuracy(in[0], in[1], nil) }, z, l)
		assertClose(t, "accuracy", got, []float64{0.75}, 0)
		w := fromF64(dt, []float64{1, 1, 0, 0}, 4)
		got = run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return Accuracy(in[0], in[1], in[2]) }, z, l, w)
		assertClose(t, "masked accuracy", got, []float64{0.5}, 0)
	}
}

// Accuracy in a training graph must not disturb Grad: it is not on the path
// to the loss, and has no gradient.
func TestAccuracyInTrainingGraph(t *testing.T) {
	g := G.NewGraph()
	z := node(g, randT(tensor.Float64, 1, -1, 1, 3, 4), "z")
	w := node(g, randT(tensor.Float64, 2, -1, 1, 4, 4), "w")
	l := node(g, labelsT(tensor.Float64, 3, 3, 4), "l")
	logits, _ := Linear(z, w, nil, LinearOpts{NoInputGrad: true})
	loss, _ := SoftmaxCrossEntropy(logits, l, nil)
	acc, _ := Accuracy(logits, l, nil)
	if _, err := G.Grad(loss, w); err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	if a := vals(acc.Value())[0]; a < 0 || a > 1 {
		t.Fatalf("accuracy %v", a)
	}
}
