package dp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/collective"
)

var _ module.StatSyncer = replicaStatSync{}

// replicaSum sums SyncBatchNorm statistics across DP's in-process replicas:
// each replica's graph calls it from its own goroutine, the last to arrive
// adds the buffers in replica order (so runs are bitwise reproducible) and
// copies the sum back to every replica.
type replicaSum struct {
	mu      sync.Mutex
	cond    *sync.Cond
	parties int // replicas running the current step
	arrived int
	gen     uint64 // completed reductions
	bufs    [][]float64
	sum     []float64
	err     error
}

func newReplicaSum(n int) *replicaSum {
	r := &replicaSum{parties: n, bufs: make([][]float64, n)}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// begin starts a step run by the first parties replicas (a batch with fewer
// rows than replicas runs on fewer) and clears a previous step's failure.
func (r *replicaSum) begin(parties int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parties, r.arrived, r.err = parties, 0, nil
	clear(r.bufs)
}

// abort fails the reductions of the current step: a replica that failed
// before reaching one must not leave the others waiting.
func (r *replicaSum) abort(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = &syncAborted{err}
	}
	r.cond.Broadcast()
}

// syncAborted is the error of a replica freed from a reduction because
// another failed: DP reports the failure itself rather than this echo.
type syncAborted struct{ cause error }

func (e *syncAborted) Error() string { return e.cause.Error() }
func (e *syncAborted) Unwrap() error { return e.cause }

// firstCause returns the lowest-numbered error that is not merely another
// replica's failure echoed through a SyncBatchNorm reduction, else the
// lowest-numbered one, with its index (-1 when there is none).
func firstCause(errs []error) (int, error) {
	first := -1
	for i, err := range errs {
		if err == nil {
			continue
		}
		var echo *syncAborted
		if !errors.As(err, &echo) {
			return i, err
		}
		if first < 0 {
			first = i
		}
	}
	if first < 0 {
		return -1, nil
	}
	return first, errs[first]
}

func (r *replicaSum) reduce(ctx context.Context, i int, buf []float64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	if i >= r.parties {
		return fmt.Errorf("replica %d takes part in a reduction of %d replicas", i, r.parties)
	}
	if r.bufs[i] != nil {
		return fmt.Errorf("replica %d reduced twice before the others caught up", i)
	}
	r.bufs[i] = buf
	r.arrived++
	if r.arrived == r.parties {
		n := len(r.bufs[0])
		for j := 1; j < r.parties; j++ {
			if len(r.bufs[j]) != n {
				r.err = fmt.Errorf("replica 0 reduces %d values, replica %d %d: the replicas' graphs differ", n, j, len(r.bufs[j]))
				r.cond.Broadcast()
				return r.err
			}
		}
		r.sum = append(r.sum[:0], r.bufs[0]...)
		for j := 1; j < r.parties; j++ {
			collective.ReduceInto(r.sum, r.bufs[j], collective.Sum)
		}
		for j := 0; j < r.parties; j++ {
			copy(r.bufs[j], r.sum)
		}
		r.arrived = 0
		clear(r.bufs)
		r.gen++
		r.cond.Broadcast()
		return nil
	}
	gen := r.gen
	stop := context.AfterFunc(ctx, func() { r.abort(fmt.Errorf("replica %d: %w", i, ctx.Err())) })
	defer stop()
	for r.gen == gen && r.err == nil {
		r.cond.Wait()
	}
	if r.gen != gen {
		return nil
	}
	return r.err
}

// replicaStatSync is replica i's view of a replicaSum.
type replicaStatSync struct {
	r *replicaSum
	i int
}

func (s replicaStatSync) AllReduceSum(ctx context.Context, buf []float64) error {
	return s.r.reduce(ctx, s.i, buf)
}

func (s replicaStatSync) Size() int { return len(s.r.bufs) }
