package trainer

// accumulation is the number of batches per optimizer step in epoch: the
// last AccumulationScheduler callback that names one, else
// Config.AccumulateGradBatches.
func (t *Trainer) accumulation(epoch int) int {
	n := t.cfg.AccumulateGradBatches
	for _, cb := range t.cfg.Callbacks {
		if h, ok := cb.(AccumulationScheduler); ok {
			if k := h.AccumulateGradBatches(epoch); k > 0 {
				n = k
			}
		}
	}
	return n
}

// accumWindow places batch bi of an epoch of nb batches in its window of
// accum batches: micro is its index in the window, and last is true for the
// batch that closes it (the window's last, or the epoch's last batch), whose
// gradients are synced and stepped.
func accumWindow(bi, nb, accum int) (micro int, last bool) {
	micro = bi % accum
	return micro, micro == accum-1 || bi == nb-1
}
