package nn_test

import (
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// An input that does not fit a layer is an error that names the layer, the
// shapes and what to change, worked out from the input: the in a Linear
// needs after nn.Flatten or, applied to the last axis as PyTorch's, the in
// the last axis has, the channel count
// to give a Conv2d, BatchNorm or BasicBlock.
func TestForwardErrorsSayWhatToChange(t *testing.T) {
	var fc *nn.Linear
	var conv *nn.Conv2d
	var bn2, bn1 *nn.BatchNorm
	var block *nn.BasicBlock
	m := newModel(t, tensor.Float32, func(b *module.Builder) {
		fc = nn.NewLinear(b, "fc", 5, 3)
		conv = nn.NewConv2d(b, "conv", nn.Conv2dConfig{In: 3, Out: 4, Kernel: 3})
		bn2 = nn.NewBatchNorm2d(b, "bn2", 4)
		bn1 = nn.NewBatchNorm1d(b, "bn1", 4)
		block = nn.NewBasicBlock(b, "block", 4, 4, 1)
	})
	for _, c := range []struct {
		shape []int
		f     func(s *module.Step, x *G.Node) *G.Node
		want  string
	}{
		{[]int{8, 6}, fc.Forward, `nn.Linear "fc": input has shape (8, 6), want [batch, 5]: the layer was made with in=5 but each row has 6 features: make it with in=6, or fix the layer that feeds it`},
		{[]int{8, 3, 2, 2}, fc.Forward, `nn.Linear "fc": input has shape (8, 3, 2, 2), want [..., 5] (Linear applies to the last axis, as PyTorch's): the layer was made with in=5 but the last axis has 2: make it with in=2 for a Linear at every position, or, for one row per example, flatten it first with nn.Flatten, which gives 12 features per example, and make the layer with in=12`},
		{[]int{8, 7, 6}, fc.Forward, `nn.Linear "fc": input has shape (8, 7, 6), want [..., 5] (Linear applies to the last axis, as PyTorch's): the layer was made with in=5 but the last axis has 6: make it with in=6`},
		{[]int{5}, fc.Forward, `give it a batch axis, even for one example ([1, 5])`},
		{[]int{8, 2, 9, 9}, conv.Forward, `nn.Conv2d "conv": input has shape (8, 2, 9, 9), want [batch, 3, height, width]: the layer was made for 3 channels but the input has 2: set Conv2dConfig.In to 2, or fix the layer that feeds it`},
		{[]int{3, 9, 9}, conv.Forward, `nn.Conv2d "conv": input has shape (3, 9, 9), want [batch, 3, height, width]: give one image a batch axis, [1, 3, 9, 9]`},
		{[]int{8, 243}, conv.Forward, `reshape rows of flat pixels to [batch, channels, height, width] first`},
		{[]int{8, 3, 9, 9}, bn2.Forward, `nn.BatchNorm2d "bn2": input has shape (8, 3, 9, 9), want [batch, 4, height, width]: the layer was made for 4 channels but the input has 3: make the layer with 3 channels, or fix the layer that feeds it`},
		{[]int{8, 3}, bn1.Forward, `nn.BatchNorm1d "bn1": input has shape (8, 3), want [batch, 4] or [batch, 4, length]: the layer was made for 4 channels but the input has 3: make it with 3`},
		{[]int{8, 4, 9, 9}, bn1.Forward, `for images use nn.NewBatchNorm2d`},
		{[]int{8, 2, 9, 9}, block.Forward, `nn.BasicBlock "block": input has shape (8, 2, 9, 9), want [batch, 4, height, width]: the layer was made for 4 channels but the input has 2: make the block with in=2`},
	} {
		x := tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(c.shape...))
		got := panicOf(func() {
			s := m.step(t, G.NewGraph(), module.Train, x)
			c.f(s, s.Input("x"))
		})
		if !strings.Contains(got, c.want) {
			t.Errorf("input %v:\n got %q\nwant %q", c.shape, got, c.want)
		}
	}
}
