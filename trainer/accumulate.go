package trainer

import "fmt"

// accumulation is the number of batches per optimizer step in epoch: the
// last AccumulationScheduler callback that names one, else
// Config.AccumulateGradBatches. A panic in a callback's
// AccumulateGradBatches is an error naming it.
func (t *Trainer) accumulation(epoch int) (int, error) {
	n := t.cfg.AccumulateGradBatches
	for i, cb := range t.cfg.Callbacks {
		if h, ok := cb.(AccumulationScheduler); ok {
			var k int
			if err := guarded(func() error { k = h.AccumulateGradBatches(epoch); return nil }); err != nil {
				return 0, fmt.Errorf("Callbacks[%d] (%s): AccumulateGradBatches(%d): %w", i, cb.Name(), epoch, err)
			}
			if k > 0 {
				n = k
			}
		}
	}
	return n, nil
}

// accumWindow places batch bi of an epoch of nb batches in its window of
// accum batches: micro is its index in the window, and last is true for the
// batch that closes it (the window's last, or the epoch's last batch), whose
// gradients are synced and stepped.
func accumWindow(bi, nb, accum int) (micro int, last bool) {
	micro = bi % accum
	return micro, micro == accum-1 || bi == nb-1
}
