package ddp

import (
	"context"
	"fmt"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/collective"
)

var (
	_ module.StatSyncer = ddpStatSync{}
)

// ddpStatSync sums SyncBatchNorm statistics over a DDP rank's group. The
// reductions are issued from inside the training graph's run, so they go
// through the group's communication goroutine like everything else and stay
// in the same order on every rank. The only gradient buckets that can be in
// flight then are this run's, queued during its backward pass at the same
// points of the graph's schedule on every rank; OptimizerStep waits for all
// of them before the next TrainStep. The check below makes a change that
// breaks this fail loudly instead of mixing up reductions.
type ddpStatSync struct{ d *DDP }

func (s ddpStatSync) AllReduceSum(ctx context.Context, buf []float64) error {
	if n := len(s.d.pending); n > 0 && s.d.runCtx == nil {
		return fmt.Errorf("SyncBatchNorm reduction issued while %d gradient buckets are still being reduced: TrainStep must follow OptimizerStep", n)
	}
	return s.d.c.AllReduce(ctx, buf, collective.Sum)
}

func (s ddpStatSync) Size() int { return s.d.c.Size() }
