package trainer

import "context"

// valDueAfter reports whether a mid-epoch validation (ValCheckInterval) is
// due after training batch bi of nb in epoch; after the last batch the
// epoch-end validation runs instead. As in Lightning, only the epochs that
// CheckValEveryNEpoch selects validate at all.
func (f *fitRun) valDueAfter(epoch, bi, nb int) bool {
	n := f.t.cfg.ValCheckInterval
	return n > 0 && (bi+1)%n == 0 && bi+1 < nb && f.valDueAtEpochEnd(epoch)
}

// valDueAtEpochEnd reports whether validation runs at the end of epoch
// (CheckValEveryNEpoch).
func (f *fitRun) valDueAtEpochEnd(epoch int) bool {
	return f.val != nil && (epoch+1)%f.t.cfg.CheckValEveryNEpoch == 0
}

// validate runs the validation loop; a stop a hook asks for comes back as
// stop, any other failure as err.
func (f *fitRun) validate(ctx context.Context, epoch int) (stop, err error) {
	return splitStop(f.t.validationLoop(ctx, f.m, f.val, epoch))
}

// validateMid runs a validation within the epoch (ValCheckInterval) and
// has the ranks agree on what follows: a Stop from its hooks on any rank,
// a signal or a cancel stops every rank there (the weights are those of
// the step before it, and the checkpoint goes on after it), rather than
// one rank leaving for the epoch's end while the others train on, or the
// stop waiting for the next step. One small all-reduce per validation.
// Inside an accumulation window (ValCheckInterval not a multiple of
// AccumulateGradBatches), which no checkpoint can hold, a signal or a
// cancel waits for the window's last batch, as after any batch.
func (f *fitRun) validateMid(ctx context.Context, epoch int) (stop, err error) {
	if stop, err = f.validate(ctx, epoch); err != nil {
		return nil, err
	}
	return f.t.agreeStop(ctx, stop, !f.t.pos.midWindow)
}

// splitStop tells a hook's request to stop training (StopTraining) apart
// from an error.
func splitStop(err error) (stop, fatal error) {
	if err == nil {
		return nil, nil // isStop allocates
	}
	if _, ok := isStop(err); ok {
		return err, nil
	}
	return nil, err
}
