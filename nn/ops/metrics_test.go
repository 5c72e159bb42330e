package ops

import (
	"fmt"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Six rows of 3 classes, counted by hand: predictions (first largest logit)
// 0 1 1 2 0 2 against labels 0 0 1 2 2 2. Row 4's label (2) ties with
// class 1 below the largest, so it ranks third: outside the top 2.
func TestClassCounts(t *testing.T) {
	z := []float64{
		3, 1, 0,
		1, 2, 0,
		0, 5, 1,
		0, 1, 4,
		3, 1, 1,
		1, 0, 3,
	}
	labels := []float64{0, 0, 1, 2, 2, 2}
	// [top-k correct, then the confusion matrix, rows true, columns predicted]
	cm := []float64{
		1, 1, 0,
		0, 1, 0,
		1, 0, 2,
	}
	// Without the matrix: true positives, predictions and labels per class.
	compact := []float64{
		1, 1, 2,
		2, 2, 2,
		2, 1, 3,
	}
	for _, dt := range dtypes {
		for _, c := range []struct {
			k    int
			topK float64
		}{{1, 4}, {2, 5}, {3, 6}} {
			for _, matrix := range []bool{true, false} {
				got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return ClassCounts(in[0], in[1], c.k, matrix) },
					fromF64(dt, z, 6, 3), fromF64(dt, labels, 6))
				want := append([]float64{c.topK}, map[bool][]float64{true: cm, false: compact}[matrix]...)
				assertClose(t, fmt.Sprintf("counts top%d matrix=%v %v", c.k, matrix, dt), got, want, 0)
			}
		}
	}
}

func TestClassCountsBadInput(t *testing.T) {
	g := G.NewGraph()
	z := node(g, fromF64(tensor.Float64, make([]float64, 6), 2, 3), "z")
	l := node(g, fromF64(tensor.Float64, []float64{0, 3}, 2), "l")
	if _, err := ClassCounts(z, l, 4, false); err == nil || !strings.Contains(err.Error(), "topK is 4 but the logits (2, 3) have 3 classes") {
		t.Errorf("topK 4 of 3 classes: %v", err)
	}
	n, err := ClassCounts(z, l, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err == nil || !strings.Contains(err.Error(), "label 3 at row 1 is not a class index in [0, 3)") {
		t.Errorf("label 3 of 3 classes: %v (value %v)", err, n.Value())
	}
}
