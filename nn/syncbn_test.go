package nn_test

import (
	"context"
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// countingSyncer is a job of one replica that counts the reductions.
type countingSyncer struct{ calls int }

func (c *countingSyncer) AllReduceSum(context.Context, []float64) error { c.calls++; return nil }
func (c *countingSyncer) Size() int                                     { return 1 }

// A BatchNorm syncs in training when it was built with BatchNormSync or
// the step's StatSync asks for every layer, and never in eval or without a
// StatSync: two reductions per training run (statistics, gradient sums).
func TestBatchNormSyncOption(t *testing.T) {
	for _, tc := range []struct {
		layer, all, hasSync bool
		mode                module.Mode
		want                int
	}{
		{layer: true, hasSync: true, mode: module.Train, want: 2},
		{all: true, hasSync: true, mode: module.Train, want: 2},
		{hasSync: true, mode: module.Train, want: 0},
		{layer: true, all: true, hasSync: true, mode: module.Validate, want: 0},
		{layer: true, mode: module.Train, want: 0},
	} {
		t.Run(fmt.Sprintf("layer=%v/all=%v/sync=%v/%v", tc.layer, tc.all, tc.hasSync, tc.mode), func(t *testing.T) {
			var bn *nn.BatchNorm
			m := newModel(t, tensor.Float64, func(b *module.Builder) {
				var opts []nn.BatchNormOption
				if tc.layer {
					opts = append(opts, nn.BatchNormSync())
				}
				bn = nn.NewBatchNorm2d(b, "bn", 3, opts...)
			})
			if bn.Sync != tc.layer {
				t.Fatalf("Sync = %v, want %v", bn.Sync, tc.layer)
			}
			cs := &countingSyncer{}
			g := G.NewGraph()
			x := randT(tensor.Float64, 4, -2, 2, 2, 3, 2, 2)
			s := m.step(t, g, tc.mode, x)
			if tc.hasSync {
				s.SetStatSync(module.NewStatSync(cs, tc.all))
			}
			y := bn.ForwardReLU(s, s.Input("x"))
			wrt := []*G.Node{s.Input("x")}
			for _, p := range s.UsedParams() {
				n, _ := s.Node(p)
				wrt = append(wrt, n)
			}
			cost := G.Must(G.Sum(G.Must(G.Reshape(y, tensor.Shape{24}))))
			if tc.mode == module.Train {
				if _, err := G.Grad(cost, wrt...); err != nil {
					t.Fatal(err)
				}
			}
			vm := G.NewTapeMachine(g)
			defer vm.Close()
			if err := vm.RunAll(); err != nil {
				t.Fatal(err)
			}
			if cs.calls != tc.want {
				t.Fatalf("%d reductions, want %d", cs.calls, tc.want)
			}
		})
	}
}
