package callbacks

import (
	"errors"
	"fmt"
	"sort"

	"github.com/fulgur-ml/fulgur/trainer"
)

// GradientAccumulationScheduler changes the number of batches per
// optimizer step by epoch: {0: 8, 4: 4, 8: 1} accumulates 8 batches in
// epochs 0-3, 4 in 4-7, 1 from 8 on. Epochs before the first key use 1.
type GradientAccumulationScheduler struct {
	epochs  []int
	factors []int
}

var (
	_ trainer.AccumulationScheduler = (*GradientAccumulationScheduler)(nil)
	_ trainer.ReadyChecker          = (*GradientAccumulationScheduler)(nil)
)

// NewGradientAccumulationScheduler checks scheduling (epochs >= 0, factors
// >= 1) and returns the callback.
func NewGradientAccumulationScheduler(scheduling map[int]int) (*GradientAccumulationScheduler, error) {
	if len(scheduling) == 0 {
		return nil, errors.New("GradientAccumulationScheduler: the schedule is empty: pass epoch -> batches per step, such as {0: 4, 10: 1}")
	}
	g := &GradientAccumulationScheduler{}
	var errs []error
	for e := range scheduling {
		g.epochs = append(g.epochs, e)
	}
	sort.Ints(g.epochs)
	for _, e := range g.epochs {
		f := scheduling[e]
		if e < 0 {
			errs = append(errs, fmt.Errorf("GradientAccumulationScheduler: epoch %d is negative: epochs count from 0", e))
		}
		if f < 1 {
			errs = append(errs, fmt.Errorf("GradientAccumulationScheduler: epoch %d has factor %d: use 1 or more batches per step", e, f))
		}
		g.factors = append(g.factors, f)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g, nil
}

func (g *GradientAccumulationScheduler) Name() string { return "GradientAccumulationScheduler" }

// CheckReady refuses a GradientAccumulationScheduler not made by
// NewGradientAccumulationScheduler (trainer.ReadyChecker).
func (g *GradientAccumulationScheduler) CheckReady() error {
	if len(g.epochs) == 0 { // the constructor refuses an empty schedule
		return literal("NewGradientAccumulationScheduler", "has no schedule and would never accumulate")
	}
	return nil
}

// AccumulateGradBatches is the factor in force at epoch.
func (g *GradientAccumulationScheduler) AccumulateGradBatches(epoch int) int {
	f := 1
	for i, e := range g.epochs {
		if e <= epoch {
			f = g.factors[i]
		}
	}
	return f
}
