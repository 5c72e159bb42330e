package builtin

import (
	"context"
	"math"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
)

// OptimizerOptions.BeforeUpdate: each strategy calls it where its gradients are
// reduced and not yet clipped or applied.

// beforeUpdate calls o.BeforeUpdate, when set, with the L2 norm of st's
// gradients [lo, hi) (reduced: the whole model's).
func beforeUpdate(o strategy.OptimizerOptions, st *module.Store, lo, hi int) error {
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

// beforeUpdate calls o.BeforeUpdate (set) with the global norm from this
// rank's sum of squared shard gradients.
func (s *Sharded) beforeUpdate(ctx context.Context, o strategy.OptimizerOptions, shardSumSquares float64) error {
	s.norm[0] = shardSumSquares
	n, err := s.globalNorm(ctx)
	if err != nil {
		return err
	}
	return o.BeforeUpdate(n)
}
