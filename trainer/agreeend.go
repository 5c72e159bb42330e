package trainer

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// A rank's outcome of a part of a call that the ranks run on their own,
// in agreeEnd's all-reduce.
const (
	endFailed    = 1
	endCancelled = 2
)

// endStops says which stops that came since the ranks last agreed on
// stopping the end of a part acts on (agreeEnd's interrupts).
type endStops int

const (
	noStops     endStops = iota // none: an evaluation's end
	signalStops                 // a signal: Fit's end hooks
	allStops                    // a signal or a cancel: the end of training
)

// agreeEnd has the ranks of a job learn, at the end of a part of a call
// that each runs on its own (an evaluation loop, whose steps exchange
// nothing under a strategy that holds the whole model in each process;
// the hooks that end a training or a Fit), whether it failed on any of
// them or had its context cancelled, and, after training (interrupts),
// whether a signal or a cancel came since the ranks last agreed on
// stopping.
//
// Without it, a rank whose loop or hook failed, or whose context was
// cancelled, returned at once, and the others found out in their next
// collective (the metrics' reduction, the gathering of predictions, the
// final barrier) at the collective's timeout, minutes later, or not at
// all: PredictEach's loop has no collective, and Fit's end hooks none
// after them, so the other ranks returned success. A signal or a cancel
// that came after the ranks' last agreement on stopping (while the epoch
// that a Stop ended ran its validation and checkpoints, in OnTrainEnd)
// was dropped: Fit returned nil and the program went on, a command line
// to its test, exiting 0 after the user's Ctrl-C.
//
// err is this rank's error (a Stop is not one; with interrupts, the
// cancelled context's error is the cancel); what names the part, for
// the other ranks' error. It returns this rank's err, naming the rank,
// when it is not nil; an error naming the ranks that failed when another
// did; with interrupts, the *InterruptedError, the interrupt checkpoint
// saved, when any rank received a signal or had its context cancelled;
// else nil. One small all-reduce, made without the context's
// cancellation, so that a cancelled rank joins it; a rank that lost its
// peers fails it at the collective's timeout, as any collective.
// stops says which stops count: with signalStops (Fit's end hooks), a
// signal does and a cancel is the hooks' to answer, as their error.
func (t *Trainer) agreeEnd(ctx context.Context, err error, what string, stops endStops) error {
	info := t.strat.Info()
	interrupts := stops != noStops
	if stops == allStops && errors.Is(err, context.Canceled) && t.cancelled(ctx) != nil {
		// A hook that gave up on the cancelled context: the cancel stops
		// the run as one outside the hooks does.
		err = nil
	}
	code := 0
	if interrupts && err == nil {
		code = t.stopCode(ctx)
		if stops == signalStops && code == ctxCancelled {
			code = 0 // the hooks' to answer
		}
	}
	if info.WorldSize < 2 {
		if err != nil {
			return err
		}
		if _, ierr := t.stopFor(ctx, nil, code); ierr != nil {
			return ierr
		}
		return nil
	}
	row := make([]float64, info.WorldSize+len(t.stopFlags))
	outcome, flags := row[:info.WorldSize], row[info.WorldSize:]
	if err != nil {
		outcome[info.Rank] = endFailed
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			outcome[info.Rank] = endCancelled
		}
	}
	markStop(flags, false, code)
	if rerr := t.strat.Reduce(context.WithoutCancel(ctx), row, make([]float64, len(row)), sumOps(len(row))); rerr != nil {
		if err != nil {
			return fmt.Errorf("rank %d of %d: %w", info.Rank, info.WorldSize, err)
		}
		return fmt.Errorf("%s: agree with the other ranks on how it ended: %w", what, rerr)
	}
	if err != nil {
		return fmt.Errorf("rank %d of %d: %w", info.Rank, info.WorldSize, err)
	}
	var others []string
	for r, v := range outcome {
		switch v {
		case endFailed:
			others = append(others, fmt.Sprintf("failed on rank %d", r))
		case endCancelled:
			others = append(others, fmt.Sprintf("stopped on rank %d, whose context was cancelled", r))
		}
	}
	if len(others) > 0 {
		return fmt.Errorf("%s %s (that rank's error says why); rank %d's part ran to its end", what, strings.Join(others, " and "), info.Rank)
	}
	if !interrupts {
		return nil
	}
	if _, ierr := t.rideStop(ctx, nil, flags); ierr != nil {
		return ierr
	}
	return nil
}
