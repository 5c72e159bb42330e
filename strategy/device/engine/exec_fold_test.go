package engine

import (
	"context"
	"math/rand/v2"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// A small resnet8 (widths 4, 8, 16) on 8x8 images: the gradient sum at each
// block's input (its convolution's and its shortcut's) is read by the
// previous block's masked-gradient op alone, so the executor folds the
// three Adds into those ops (ops.SumInputDoer); loss and every gradient
// stay bit for bit TapeMachine's, which runs the Adds, in both dtypes and
// over runs of different batch sizes.
func TestGradientSumsFoldIntoMaskOps(t *testing.T) {
	fields := []data.Field{{Name: "x", Shape: []int{1, 8, 8}}, {Name: "y"}}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		engines := [2]*Engine{newEngineFields(t, &models.ResNet{Width: 4}, dt, false, fields),
			newEngineFields(t, &models.ResNet{Width: 4}, dt, true, fields)}
		for run, n := range []int{6, 3, 6} {
			r := rand.New(rand.NewPCG(uint64(run), 5))
			b := &data.Batch{Size: n, Fields: fields, Data: [][]float32{make([]float32, n*64), make([]float32, n)}}
			for i := range b.Data[0] {
				b.Data[0][i] = r.Float32()
			}
			for i := range b.Data[1] {
				b.Data[1][i] = float32(r.IntN(10))
			}
			var loss [2]float64
			for i, e := range engines {
				res, err := e.Run(context.Background(), module.Train, b, false, 1)
				if err != nil {
					t.Fatal(err)
				}
				loss[i] = res.Loss
			}
			if loss[0] != loss[1] {
				t.Fatalf("%v run %d: loss %v (executor) vs %v (tape)", dt, run, loss[0], loss[1])
			}
			g1, g2 := grads(engines[0].Store()), grads(engines[1].Store())
			for k := range g1 {
				if g1[k] != g2[k] {
					t.Fatalf("%v run %d: grad[%d] %v (executor) vs %v (tape)", dt, run, k, g1[k], g2[k])
				}
			}
		}
		folded := 0
		ex := engines[0].graphs[key{mode: module.Train, batch: 6}].exec
		for _, st := range ex.steps {
			if st.sum != nil {
				folded++
			}
			if !st.add {
				continue
			}
			for _, r := range ex.steps {
				if sd, ok := r.op.(ops.SumInputDoer); ok && r.in[sd.SumInput()] == st.out {
					t.Errorf("%v: %v still reads its output gradient from an Add step", dt, r.op)
				}
			}
		}
		if folded != 3 {
			t.Fatalf("%v: %d gradient sums folded, want resnet8's 3 (one per block input)", dt, folded)
		}
	}
}
