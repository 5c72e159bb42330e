package data_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

type fixedOrder []int

func (f fixedOrder) Order(epoch, n int) ([]int, []bool) { return f, nil }

// DistributedSampler.Inner shards another sampler's order (its length, not
// the dataset's), padded, truncated or uneven as without one.
func TestDistributedSamplerInner(t *testing.T) {
	inner := fixedOrder{9, 9, 4, 7, 1}
	for _, c := range []struct {
		s        data.DistributedSampler
		idx      []int
		pad      []bool
		nSamples int
	}{
		{data.DistributedSampler{Rank: 0, World: 2, Inner: inner}, []int{9, 4, 1}, []bool{false, false, false}, 3},
		{data.DistributedSampler{Rank: 1, World: 2, Inner: inner}, []int{9, 7, 9}, []bool{false, false, true}, 3},
		{data.DistributedSampler{Rank: 1, World: 2, Inner: inner, DropLast: true}, []int{9, 7}, []bool{false, false}, 2},
		{data.DistributedSampler{Rank: 1, World: 2, Inner: inner, NoPad: true}, []int{9, 7}, []bool{false, false}, 2},
		{data.DistributedSampler{Rank: 2, World: 3, Inner: fixedOrder{}}, []int{}, []bool{}, 0},
	} {
		idx, pad := c.s.Order(0, 10)
		if !reflect.DeepEqual(idx, c.idx) || !reflect.DeepEqual(pad, c.pad) {
			t.Errorf("%+v: Order = %v %v, want %v %v", c.s, idx, pad, c.idx, c.pad)
		}
		if n := c.s.NumSamples(10); n != c.nSamples {
			t.Errorf("%+v: NumSamples = %d, want %d", c.s, n, c.nSamples)
		}
	}
	err := data.DistributedSampler{World: 2, Inner: inner, Shuffle: true}.Validate()
	if err == nil || !strings.Contains(err.Error(), "Shuffle is set beside Inner") {
		t.Errorf("Shuffle beside Inner: %v", err)
	}
}
