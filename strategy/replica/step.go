package replica

import (
	"context"
	"fmt"
	"math"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
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

// maxKeptScratch is the most values ReduceMetrics keeps in its scratch
// between calls: enough for any step's metrics, while a large reduction
// (the trainer gathering predictions, two values per predicted value)
// does not stay pinned to the strategy after it returns.
const maxKeptScratch = 1 << 12

// ReduceMetrics combines per-rank metric values: Mean and Sum values and
// every weight are summed in one all-reduce; Max and Min (negated) share a
// second one, issued only when present (every rank has the same ops).
// scratch is reused across calls, unless a call needed more than a few
// thousand values. It serves the strategies' Reduce.
func ReduceMetrics(ctx context.Context, c collective.Collective, scratch *[]float64, sums, weights []float64, ops []module.Reduce) error {
	if len(sums) != len(ops) || len(weights) != len(ops) {
		return fmt.Errorf("Reduce: %d values, %d weights and %d ops: pass one of each per metric", len(sums), len(weights), len(ops))
	}
	n := len(ops)
	buf := (*scratch)[:0]
	if cap(buf) < 2*n {
		buf = make([]float64, 0, 2*n) // once, not grown by append
	}
	var nMax int
	for i, op := range ops {
		if op == module.Max || op == module.Min {
			nMax++
			buf = append(buf, 0)
		} else {
			buf = append(buf, sums[i])
		}
	}
	buf = append(buf, weights...)
	if cap(buf) <= maxKeptScratch {
		*scratch = buf
	}
	if n == 0 {
		return nil
	}
	if err := c.AllReduce(ctx, buf, collective.Sum); err != nil {
		return err
	}
	for i, op := range ops {
		if op != module.Max && op != module.Min {
			sums[i] = buf[i]
		}
	}
	copy(weights, buf[n:2*n])
	if nMax == 0 {
		return nil
	}
	mx := buf[:0]
	for i, op := range ops {
		switch op {
		case module.Max:
			mx = append(mx, sums[i])
		case module.Min:
			mx = append(mx, -sums[i])
		}
	}
	if err := c.AllReduce(ctx, mx, collective.Max); err != nil {
		return err
	}
	j := 0
	for i, op := range ops {
		switch op {
		case module.Max:
			sums[i] = mx[j]
			j++
		case module.Min:
			sums[i] = -mx[j]
			j++
		}
	}
	return nil
}
