package replica_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

// units of 10, 3 and 1 elements: blocks of 4, 3 and 3 at world 3, with
// empty blocks in the short units.
var units = []engine.Unit{{Lo: 0, Hi: 10}, {Lo: 10, Hi: 13}, {Lo: 13, Hi: 14}}

const np = 14

// The ranks' chunks cover every unit once, and each rank's lie end to end
// in its shard.
func TestChunksCoverEveryUnitOnce(t *testing.T) {
	for _, world := range []int{1, 2, 3, 5} {
		owner := make([]int, np)
		for r := range world {
			cs, n := replica.Chunks(units, world, r)
			if len(cs) != len(units) {
				t.Fatalf("world %d rank %d: %d chunks for %d units", world, r, len(cs), len(units))
			}
			local := 0
			for u, c := range cs {
				if c.Lo < units[u].Lo || c.Hi > units[u].Hi || c.Lo > c.Hi {
					t.Errorf("world %d rank %d: chunk %+v lies outside unit %+v", world, r, c, units[u])
				}
				if lo, hi := c.Span(); lo != local || hi != local+c.Hi-c.Lo {
					t.Errorf("world %d rank %d: chunk %+v at [%d, %d) of the shard, want [%d, %d)", world, r, c, lo, hi, local, local+c.Hi-c.Lo)
				}
				local += c.Hi - c.Lo
				for i := c.Lo; i < c.Hi; i++ {
					owner[i]++
				}
			}
			if n != local {
				t.Errorf("world %d rank %d: shard length %d, the chunks hold %d", world, r, n, local)
			}
		}
		for i, k := range owner {
			if k != 1 {
				t.Errorf("world %d: element %d is in %d ranks' chunks, want 1", world, i, k)
			}
		}
	}
}

// shardOf is rank's shard of whole: its chunks' values end to end.
func shardOf(whole []float64, cs []replica.Chunk, n int) []float64 {
	out := make([]float64, 0, n)
	for _, c := range cs {
		out = append(out, whole[c.Lo:c.Hi]...)
	}
	return out
}

// An optimizer buffer saved in chunks at world 3 (the ranks' dicts
// merged) loads into the shards of world 2; gathered at world 3 it is the
// whole buffer on every rank.
func TestOptimizerChunksAcrossWorldSizes(t *testing.T) {
	whole := make([]float64, np)
	for i := range whole {
		whole[i] = float64(i*i) + 0.5
	}
	saved := &strategy.StateDict{}
	for r := range 3 {
		cs, n := replica.Chunks(units, 3, r)
		saved.Tensors = append(saved.Tensors, replica.OptimizerChunks("exp_avg", shardOf(whole, cs, n), cs, np)...)
	}
	if err := saved.Check(); err != nil {
		t.Fatalf("the merged dict: %v", err)
	}
	for r := range 2 {
		cs, n := replica.Chunks(units, 2, r)
		got, err := replica.LoadOptimizerChunks(saved, "exp_avg", cs, n)
		if err != nil {
			t.Fatal(err)
		}
		if want := shardOf(whole, cs, n); !slices.Equal(got, want) {
			t.Errorf("world 2 rank %d loaded %v, want %v", r, got, want)
		}
	}
	cs, n := replica.Chunks(units, 2, 0)
	if _, err := replica.LoadOptimizerChunks(saved, "exp_avg_sq", cs, n); err == nil || !strings.HasPrefix(err.Error(), `optimizer buffer "exp_avg_sq": `) {
		t.Errorf("loading a buffer the dict lacks: %v, want an error naming it", err)
	}

	g := group(t, 3)
	var got [3][]float64
	errs := make(chan error, 3)
	for r := range 3 {
		go func() {
			cs, n := replica.Chunks(units, 3, r)
			var err error
			got[r], err = replica.GatherChunks(context.Background(), g[r], shardOf(whole, cs, n), units, cs, np)
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for r := range got {
		if !slices.Equal(got[r], whole) {
			t.Errorf("rank %d gathered %v, want %v", r, got[r], whole)
		}
	}
}
