package engine_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
)

// lseRef is torch.logsumexp(x, axis) of x of shape s (row-major), and its
// gradient for an output gradient dy: softmax(x) along axis times dy.
func lseRef(x []float64, s []int, axis int, dy []float64) (out, grad []float64) {
	outer, n, inner := 1, s[axis], 1
	for _, d := range s[:axis] {
		outer *= d
	}
	for _, d := range s[axis+1:] {
		inner *= d
	}
	out, grad = make([]float64, outer*inner), make([]float64, len(x))
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			m := math.Inf(-1)
			for k := 0; k < n; k++ {
				m = math.Max(m, x[(o*n+k)*inner+i])
			}
			var sum float64
			for k := 0; k < n; k++ {
				sum += math.Exp(x[(o*n+k)*inner+i] - m)
			}
			lse := m + math.Log(sum)
			out[o*inner+i] = lse
			for k := 0; k < n; k++ {
				j := (o*n+k)*inner + i
				grad[j] = math.Exp(x[j]-lse) * dy[o*inner+i]
			}
		}
	}
	return out, grad
}

// G.LogSumExp in Gorgonia v0.9.17 computes log(Σ exp(x - max) + max)
// instead of log(Σ exp(x - max)) + max for a vector, and fails to build for
// a tensor of two axes or more (it subtracts the [N] max from the [N, C]
// input without a broadcast). A vector's is refused when the graph is
// built, on the executor and the TapeMachine, in training and predict
// graphs, naming the node and the replacement; a tensor's build error
// gets the same replacement. The max-shifted composition the errors name
// gives torch.logsumexp's values and gradients (softmax(x)·dy) in float32
// and float64.
func TestStockLogSumExp(t *testing.T) {
	ctx := context.Background()
	fix := "m := G.Max(x, axis); m1 := G.Reshape(m, x's shape with 1 at axis); lse := G.Add(G.Log(G.Sum(G.Exp(G.BroadcastSub(x, m1, nil, []byte{axis})), axis)), m)"
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, tape := range []bool{false, true} {
			for _, mode := range []module.Mode{module.Train, module.Predict} {
				name := fmt.Sprintf("%v tape %v %v", dt, tape, mode)
				vec := &stockModel{shape: []int{5}, build: func(_ *module.Step, x *G.Node) (*G.Node, error) { return G.LogSumExp(x, 0) }}
				e, _ := stockEngine(t, vec, dt, tape, xVals(5))
				_, err := e.Run(ctx, mode, oneRow, false, 1)
				for _, want := range []string{"G.LogSumExp of a (5) input: Gorgonia v0.9.17 computes log(Σ exp(x - max) + max)", `(node "`, "computed from x", fix, "nn.LogSoftmax(x, axis)"} {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("%s: G.LogSumExp of a vector: err = %v, want %q in it", name, err, want)
					}
				}
				mat := &stockModel{shape: []int{4, 5}, build: func(_ *module.Step, x *G.Node) (*G.Node, error) { return G.LogSumExp(x, 1) }}
				e, _ = stockEngine(t, mat, dt, tape, xVals(20))
				_, err = e.Run(ctx, mode, oneRow, false, 1)
				for _, want := range []string{"G.LogSumExp of a tensor of two axes or more fails to build in Gorgonia v0.9.17", fix, "Shape mismatch: (4, 5) and (4)"} {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("%s: G.LogSumExp of a matrix: err = %v, want %q in it", name, err, want)
					}
				}
			}
		}
	}

	// The replacement, written as the errors say, along each axis of a
	// [2, 3, 4], of a matrix and of a vector.
	lse := func(x *G.Node, axis int) (*G.Node, error) {
		if x.Shape().Dims() == 1 { // as the errors say: a vector as [1, n]
			x, axis = G.Must(G.Reshape(x, tensor.Shape{1, x.Shape()[0]})), 1
		}
		m := G.Must(G.Max(x, axis))
		shape := append(tensor.Shape(nil), x.Shape()...)
		shape[axis] = 1
		m1 := G.Must(G.Reshape(m, shape))
		return G.Add(G.Must(G.Log(G.Must(G.Sum(G.Must(G.Exp(G.Must(G.BroadcastSub(x, m1, nil, []byte{byte(axis)})))), axis)))), m)
	}
	for _, c := range []struct {
		shape []int
		axis  int
	}{{[]int{2, 3, 4}, 0}, {[]int{2, 3, 4}, 1}, {[]int{2, 3, 4}, 2}, {[]int{4, 5}, 1}, {[]int{5}, 0}} {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			name := fmt.Sprintf("logsumexp of %v along %d, %v", c.shape, c.axis, dt)
			m := &stockModel{shape: c.shape, build: func(_ *module.Step, x *G.Node) (*G.Node, error) { return lse(x, c.axis) }}
			vector := len(c.shape) == 1
			if vector { // its [1] lse as a scalar: the loss itself
				m.build = func(_ *module.Step, x *G.Node) (*G.Node, error) { return G.Sum(G.Must(lse(x, c.axis))) }
			}
			n := 1
			for _, d := range c.shape {
				n *= d
			}
			xs := xVals(n)
			for i := range xs {
				xs[i] *= 30 // exp(x) alone would overflow float32 at 89
				if i%7 == 0 {
					xs[i] += 100
				}
			}
			wantOut, _ := lseRef(xs, c.shape, c.axis, make([]float64, n))
			// The loss: Σ (out - target)², or a vector's lse itself.
			tgt := targetVals(len(wantOut))
			dy := make([]float64, len(wantOut))
			wantLoss := 0.0
			for i, v := range wantOut {
				dy[i] = 2 * (v - tgt[i])
				wantLoss += (v - tgt[i]) * (v - tgt[i])
			}
			if vector {
				dy[0], wantLoss = 1, wantOut[0]
			}
			_, wantGrad := lseRef(xs, c.shape, c.axis, dy)
			tol := 1e-12
			if dt == tensor.Float32 {
				tol = 1e-5
			}
			e, st := stockEngine(t, m, dt, false, xs)
			r, err := e.Run(ctx, module.Predict, oneRow, false, 1)
			if err != nil {
				t.Fatalf("%s: predict: %v", name, err)
			}
			if !vector { // a scalar output is no *tensor.Dense: the loss checks it
				near(t, name+" output", denseVals(r.Output), wantOut, tol)
			}
			if r, err = e.Run(ctx, module.Train, oneRow, false, 1); err != nil {
				t.Fatalf("%s: train: %v", name, err)
			}
			near(t, name+" loss", []float64{r.Loss}, []float64{wantLoss}, 10*tol)
			near(t, name+" gradient", storeGrad(st), wantGrad, 10*tol)
		}
	}
}
