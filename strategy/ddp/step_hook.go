package ddp

import (
	"context"

	"github.com/fulgur-ml/fulgur/strategy"
)

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
