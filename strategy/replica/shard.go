package replica

import (
	"context"
	"fmt"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
)

// Chunk is a rank's block [Lo, Hi) of a unit, in flat parameter
// coordinates, stored at Local in the rank's shard: its blocks of every
// unit laid end to end, the span its optimizer is bound to (sharded,
// fsdp).
type Chunk struct{ Lo, Hi, Local int }

// Span is c's place [lo, hi) in the shard.
func (c Chunk) Span() (lo, hi int) { return c.Local, c.Local + c.Hi - c.Lo }

// Chunks lays out the blocks that rank owns of units in a group of world
// ranks (block rank of each unit, as collective.Offset and BlockLen cut
// it) and returns them with the length of the shard they make.
func Chunks(units []engine.Unit, world, rank int) ([]Chunk, int) {
	out := make([]Chunk, 0, len(units))
	n := 0
	for _, u := range units {
		size := u.Hi - u.Lo
		lo := u.Lo + collective.Offset(size, world, rank)
		c := Chunk{Lo: lo, Hi: lo + collective.BlockLen(size, world, rank), Local: n}
		out = append(out, c)
		n += c.Hi - c.Lo
	}
	return out, n
}

// OptimizerChunks cuts buf, the optimizer's buffer name over the shard of
// chunks, into one tensor per chunk: each the span [Lo, Hi) of the global
// buffer of np values (one per parameter element) that it is, as a state
// dict saved by any strategy at any world size holds it.
func OptimizerChunks(name string, buf []float64, chunks []Chunk, np int) []strategy.Tensor {
	out := make([]strategy.Tensor, 0, len(chunks))
	for _, c := range chunks {
		lo, hi := c.Span()
		out = append(out, strategy.Tensor{Name: strategy.OptimizerPrefix + name, Dtype: tensor.Float64, Shape: []int{np}, Lo: c.Lo, Hi: c.Hi, Data64: buf[lo:hi]})
	}
	return out
}

// GatherChunks all-gathers, unit by unit over c (whose ranks hold the
// units' blocks, chunks being this rank's), the buffer buf over the shard
// into the whole buffer of np values.
func GatherChunks(ctx context.Context, c collective.Collective, buf []float64, units []engine.Unit, chunks []Chunk, np int) ([]float64, error) {
	whole := make([]float64, np)
	for u, un := range units {
		lo, hi := chunks[u].Span()
		if err := c.AllGather(ctx, buf[lo:hi], whole[un.Lo:un.Hi]); err != nil {
			return nil, err
		}
	}
	return whole, nil
}

// LoadOptimizerChunks reads the chunks' spans of the optimizer's buffer
// name from sd (whole, or spans of any layout that cover them) and lays
// them end to end, as the shard of shardLen values holds them.
func LoadOptimizerChunks(sd *strategy.StateDict, name string, chunks []Chunk, shardLen int) ([]float64, error) {
	buf := make([]float64, shardLen)
	for _, c := range chunks {
		v, err := sd.Span(strategy.OptimizerPrefix+name, c.Lo, c.Hi)
		if err != nil {
			return nil, fmt.Errorf("optimizer buffer %q: %w", name, err)
		}
		copy(buf[c.Local:], v)
	}
	return buf, nil
}
