package replica

import (
	"math"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
)

// BeforeUpdate calls o.BeforeUpdate, when set, with the L2 norm of st's
// gradients [lo, hi) (reduced: the whole model's). Each strategy calls it
// where its gradients are reduced and not yet clipped or applied.
func BeforeUpdate(o strategy.OptimizerOptions, st *module.Store, lo, hi int) error {
	if o.BeforeUpdate == nil {
		return nil
	}
	var ss float64
	if st.Dtype() == tensor.Float32 {
		ss = optim.SumSquares32(st.Grad32()[lo:hi])
	} else {
		ss = optim.SumSquares64(st.Grad64()[lo:hi])
	}
	return o.BeforeUpdate(math.Sqrt(ss))
}

// ApplyStep clips the gradients of [lo, hi) and runs one optimizer step over
// them: the shared tail of every strategy whose gradients are already reduced.
func ApplyStep(st *module.Store, opt optim.Optimizer, o strategy.OptimizerOptions, lo, hi int) float64 {
	norm := math.NaN()
	opt.Begin()
	if st.Dtype() == tensor.Float32 {
		g := st.Grad32()[lo:hi]
		if o.ClipValue > 0 {
			optim.ClipGradValue32(g, o.ClipValue)
		}
		if o.ClipNorm > 0 {
			norm = optim.ClipGradNorm32(g, o.ClipNorm)
		}
		opt.Update32(st.Data32()[lo:hi], g, lo)
	} else {
		g := st.Grad64()[lo:hi]
		if o.ClipValue > 0 {
			optim.ClipGradValue64(g, o.ClipValue)
		}
		if o.ClipNorm > 0 {
			norm = optim.ClipGradNorm64(g, o.ClipNorm)
		}
		opt.Update64(st.Data64()[lo:hi], g, lo)
	}
	return norm
}
