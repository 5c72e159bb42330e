package ops

import (
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestDirectConvWorkersMatchSerial: the direct path's forward, input and
// weight gradients are bit for bit the same on one worker and on three
// (grain 1, so that every pass splits), and a depthwise and a 2-channel
// grouped convolution do take it.
func TestDirectConvWorkersMatchSerial(t *testing.T) {
	defer func(w func() int, gr int) { imageWorkers, imageGrain = w, gr }(imageWorkers, imageGrain)
	imageGrain = 1
	for _, c := range []struct {
		n, c, oc, hw, k, groups int
		o                       Conv2dOpts
	}{
		{7, 12, 12, 9, 3, 12, Conv2dOpts{Padding: [2]int{1, 1}}},
		{5, 8, 16, 10, 5, 4, Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{2, 2}}},
	} {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			name := fmt.Sprintf("%d groups of %d channels, %v", c.groups, c.c/c.groups, dt)
			o := c.o
			o.Groups = c.groups
			g := G.NewGraph()
			xn := G.NewTensor(g, dt, 4, G.WithShape(c.n, c.c, c.hw, c.hw), G.WithName("x"))
			wn := G.NewTensor(g, dt, 4, G.WithShape(c.oc, c.c/c.groups, c.k, c.k), G.WithName("w"))
			if y, err := Conv2d(xn, wn, nil, o); err != nil {
				t.Fatal(err)
			} else if _, ok := y.Op().(*directConvOp); !ok {
				t.Fatalf("%s: op %v, want the direct path", name, y.Op())
			}
			x := randT(dt, 1, -1, 1, c.n, c.c, c.hw, c.hw)
			w := randT(dt, 2, -1, 1, c.oc, c.c/c.groups, c.k, c.k)
			b := randT(dt, 3, -1, 1, c.oc)
			oh := (c.hw+2*o.Padding[0]-c.k)/max(1, o.Stride[0]) + 1
			r := randT(dt, 4, -1, 1, c.n, c.oc, oh, oh)
			SetImageWorkers(1)
			y1, dx1, dw1, _ := convGrads(t, x, w, b, r, o)
			SetImageWorkers(3)
			y3, dx3, dw3, _ := convGrads(t, x, w, b, r, o)
			sameBits(t, name+" output", y3, y1)
			sameBits(t, name+" input gradient", dx3, dx1)
			sameBits(t, name+" weight gradient", dw3, dw1)
		}
	}
	SetImageWorkers(0)
}
