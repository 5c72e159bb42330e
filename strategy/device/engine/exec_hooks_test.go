package engine

import (
	"context"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
)

// A sharded engine refuses, at its first run, units that do not cut the
// parameters into whole tensors in order, a store that holds parameters,
// (with Gather) or none (without), and a scratch too small or given
// without Gather; each error says what to change.
func TestShardingRefusesBadUnits(t *testing.T) {
	b := module.NewBuilder(tensor.Float32)
	if err := (twoLayer{}).Configure(b); err != nil {
		t.Fatal(err)
	}
	specs, _ := b.Specs() // w1 [0, 35), b1 [35, 42), w2 [42, 49)
	layout, err := module.NewLayoutStore(specs, tensor.Float32, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := module.NewStore(specs, tensor.Float32, 1)
	gather := func(context.Context, int, any) Wait { return func() error { return nil } }
	fields := []data.Field{{Name: "x", Shape: []int{5}}, {Name: "y", Shape: []int{}}}
	for _, tc := range []struct {
		name     string
		st       *module.Store
		sh       Sharding
		noGather bool
		wants    string
	}{
		{"gap", layout, Sharding{Units: []Unit{{0, 35}, {36, 49}}}, false, "next expected at 35"},
		{"short", layout, Sharding{Units: []Unit{{0, 42}}}, false, "the units end at 42 but the model has 49"},
		{"straddles", layout, Sharding{Units: []Unit{{0, 30}, {30, 49}}}, false, `tensor "w1" [0, 35) straddles unit 0 [0, 30)`},
		{"full store", full, Sharding{Units: []Unit{{0, 49}}}, false, "needs a layout store"},
		{"layout store without gather", layout, Sharding{Units: []Unit{{0, 49}}}, true, "needs Gather"},
		{"scratch without gather", full, Sharding{Units: []Unit{{0, 49}}, Scratch: make([]float32, 49)}, true, "leave Scratch nil"},
		{"small scratch", layout, Sharding{Units: []Unit{{0, 49}}, Scratch: make([]float32, 48)}, false, "at least the largest unit's 49"},
		{"scratch dtype", layout, Sharding{Units: []Unit{{0, 49}}, Scratch: make([]float64, 49)}, false, "pass the store's dtype"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := tc.sh
			sh.Gather, sh.Reduce = gather, gather
			if tc.noGather {
				sh.Gather = nil
			}
			e := New(twoLayer{}, tc.st, fields, 1, WithSharding(&sh))
			_, err := e.Run(context.Background(), module.Train, batchOf(4, 1), false, 1)
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Errorf("Run: %v, want an error saying %q", err, tc.wants)
			}
		})
	}
}
