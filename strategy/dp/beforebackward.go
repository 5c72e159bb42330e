package dp

import (
	"context"
	"fmt"
	"sync"

	"github.com/fulgur-ml/fulgur/data"
)

// backwardGate holds DP's replicas between their forward and backward
// passes while the step's TrainOptions.BeforeBackward runs once: each
// replica's engine stops there (engine.SetBeforeBackward) and arrives with
// its loss; replica 0 waits for the others, calls the hook with the
// batch's loss (the replicas' losses weighted by rows, as trainStep
// returns it) and lets every replica go on, or fail with the hook's error.
type backwardGate struct {
	mu      sync.Mutex
	cond    *sync.Cond
	parties int // replicas running the current step
	arrived int
	passed  bool // the hook has run for the current step
	losses  []float64
	rows    []int
	total   int
	hook    func(loss float64) error
	ctx     context.Context // of the current step: waits end with it
	hookErr error           // the hook's error in the current step
	err     error           // a replica failed: the others stop waiting
	pass    []func(loss float64) error
}

func newBackwardGate(n int) *backwardGate {
	g := &backwardGate{losses: make([]float64, n), rows: make([]int, n)}
	g.cond = sync.NewCond(&g.mu)
	// Bound once: the engines call them every step.
	g.pass = make([]func(float64) error, n)
	for i := range g.pass {
		g.pass[i] = func(loss float64) error { return g.arrive(i, loss) }
	}
	return g
}

// begin starts a step run under ctx by the replicas given subs, parts of
// a batch of total rows, with hook to call.
func (g *backwardGate) begin(ctx context.Context, hook func(float64) error, subs []data.Batch, total int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.parties, g.arrived, g.passed, g.total = len(subs), 0, false, total
	g.ctx, g.hook, g.hookErr, g.err = ctx, hook, nil, nil
	for i, s := range subs {
		g.rows[i] = s.Size
	}
}

// abort frees the replicas waiting at the gate: one failed before
// reaching it.
func (g *backwardGate) abort(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = &syncAborted{err}
	}
	g.cond.Broadcast()
}

func (g *backwardGate) arrive(i int, loss float64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	g.losses[i] = loss
	g.arrived++
	ctx := g.ctx
	stop := context.AfterFunc(ctx, func() { g.abort(fmt.Errorf("replica %d waits before its backward pass: %w", i, ctx.Err())) })
	defer stop()
	if i != 0 {
		g.cond.Broadcast()
		for !g.passed && g.err == nil {
			g.cond.Wait()
		}
		switch {
		case !g.passed:
			return g.err
		case g.hookErr != nil:
			// Replica 0 reports the hook's error itself.
			return &syncAborted{g.hookErr}
		}
		return nil
	}
	for g.arrived < g.parties && g.err == nil {
		g.cond.Wait()
	}
	if g.err != nil {
		return g.err
	}
	l := 0.0
	for j := 0; j < g.parties; j++ {
		l += rowShare(g.losses[j], g.rows[j], g.total)
	}
	g.mu.Unlock()
	err := g.hook(l)
	g.mu.Lock()
	g.passed, g.hookErr = true, err
	g.cond.Broadcast()
	return err
}

// rowShare is a replica's loss over rows of the batch's total, weighted so
// that the replicas' shares add up to the batch's mean loss.
func rowShare(loss float64, rows, total int) float64 {
	return loss * float64(rows) / float64(total)
}
