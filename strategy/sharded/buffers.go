package sharded

import (
	"context"

	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

// buffers is what a rank holds of the gradients, for float32 or float64
// models (flat).
type buffers interface {
	// reduce is the engine's hand-over of unit u's gradient (engine.Sharding).
	reduce(ctx context.Context, u int, grad any) engine.Wait
	clearGrads()
	sumSquares() float64
	clipValue(v float64)
	// update scales this rank's gradients by clip (< 1: clipping) and
	// updates its chunks of the parameters (after the optimizer's Begin).
	update(clip float64)
	// gather all-gathers every unit's chunks into the whole parameters.
	gather(ctx context.Context) error
}

type flat[T float32 | float64] struct {
	s      *Sharded
	params []T // the store's parameters, whole
	// grads is the store's whole gradient buffer under stage 1, this
	// rank's shard of the reduced gradients under stage 2.
	grads []T
	// send carries this rank's chunks of the parameters to the all-gather:
	// the shard of the gradients under stage 2 (used up by then), a buffer
	// of its own under stage 1; nil at one rank.
	send []T
	// acc is the landing of a micro-batch's reduce-scatter while
	// accumulating (stage 2; made on first use).
	acc     []T
	optStep func(params, grads []T, off int)
}

func newFlat[T float32 | float64](s *Sharded, params, storeGrads []T, step func(params, grads []T, off int)) *flat[T] {
	f := &flat[T]{s: s, params: params, grads: storeGrads, optStep: step}
	if s.stage == 2 {
		f.grads = make([]T, s.shardLen)
		f.send = f.grads
	} else if s.job.World() > 1 {
		f.send = make([]T, s.shardLen)
	}
	return f
}

// grad is chunk c's reduced gradient.
func (f *flat[T]) grad(c replica.Chunk) []T {
	if f.s.stage == 1 {
		return f.grads[c.Lo:c.Hi]
	}
	lo, hi := c.Span()
	return f.grads[lo:hi]
}

func noWait() error { return nil }

func (f *flat[T]) reduce(ctx context.Context, u int, grad any) engine.Wait {
	s := f.s
	g := grad.([]T)
	scale, accumulate := T(s.scale), s.accumulate
	if s.stage == 1 {
		un := s.units[u]
		dst := f.grads[un.Lo:un.Hi]
		engine.Combine(dst, g, scale, accumulate)
		if !s.sync {
			return noWait // accumulating locally until the step's last micro-batch
		}
		return replica.Traced(s.prof, s.c.AllReduceAsync(ctx, dst, collective.Mean), "all-reduce unit", "wait all-reduce")
	}
	c := s.chunks[u]
	recv := f.grad(c)
	if accumulate {
		if f.acc == nil {
			f.acc = make([]T, s.shardLen)
		}
		lo, hi := c.Span()
		recv = f.acc[lo:hi]
	}
	wait := replica.Traced(s.prof, s.c.ReduceScatterAsync(ctx, g, recv, collective.Mean), "reduce-scatter unit", "wait reduce-scatter")
	return func() error {
		if err := wait(); err != nil {
			return err
		}
		if accumulate || scale != 1 {
			engine.Combine(f.grad(c), recv, scale, accumulate)
		}
		return nil
	}
}

func (f *flat[T]) clearGrads() { clear(f.grads) }

func (f *flat[T]) sumSquares() float64 {
	ss := 0.0
	for _, c := range f.s.chunks {
		ss += optim.SumSquares(f.grad(c))
	}
	return ss
}

func (f *flat[T]) clipValue(v float64) {
	for _, c := range f.s.chunks {
		optim.ClipGradValue(f.grad(c), v)
	}
}

func (f *flat[T]) update(clip float64) {
	for _, c := range f.s.chunks {
		g := f.grad(c)
		if clip < 1 {
			optim.ScaleGrads(g, clip)
		}
		f.optStep(f.params[c.Lo:c.Hi], g, c.Local)
	}
}

func (f *flat[T]) gather(ctx context.Context) error {
	s := f.s
	s.handles = s.handles[:0]
	for u, c := range s.chunks {
		lo, hi := c.Span()
		copy(f.send[lo:hi], f.params[c.Lo:c.Hi])
		un := s.units[u]
		s.handles = append(s.handles, s.c.AllGatherAsync(ctx, f.send[lo:hi], f.params[un.Lo:un.Hi]))
	}
	var first error
	for _, h := range s.handles {
		if err := h.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
