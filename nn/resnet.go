package nn

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// BasicBlock is the ResNet block of BENCHMARKS.md: conv3x3(stride) + BN +
// ReLU + conv3x3 + BN, plus the shortcut (identity, or conv1x1(stride) + BN
// when the shape changes), then ReLU. Names follow torchvision: conv1, bn1,
// conv2, bn2, downsample.0 (conv) and downsample.1 (BN).
type BasicBlock struct {
	Name         string
	In, Out      int
	Stride       int
	conv1, conv2 *Conv2d
	bn1, bn2     *BatchNorm
	downConv     *Conv2d
	downBN       *BatchNorm
}

// NewBasicBlock declares the block's layers under name.
func NewBasicBlock(b *module.Builder, name string, in, out, stride int) *BasicBlock {
	sb := b.Scope(name)
	k := &BasicBlock{Name: b.Name(name), In: in, Out: out, Stride: stride}
	if stride < 1 {
		b.Errorf("nn.BasicBlock %q has stride %d: want 1 or more", k.Name, stride)
		stride = 1
	}
	sb.Layer("BasicBlock", 0)
	k.conv1 = NewConv2d(sb, "conv1", Conv2dConfig{In: in, Out: out, Kernel: 3, Stride: stride, Padding: 1, NoBias: true})
	k.bn1 = NewBatchNorm2d(sb, "bn1", out)
	k.conv2 = NewConv2d(sb, "conv2", Conv2dConfig{In: out, Out: out, Kernel: 3, Padding: 1, NoBias: true})
	k.bn2 = NewBatchNorm2d(sb, "bn2", out)
	if stride != 1 || in != out {
		ds := sb.Scope("downsample")
		k.downConv = NewConv2d(ds, "0", Conv2dConfig{In: in, Out: out, Kernel: 1, Stride: stride, NoBias: true})
		k.downBN = NewBatchNorm2d(ds, "1", out)
	}
	return k
}

// Forward adds the block to s's graph; x must be [batch, In, H, W].
func (k *BasicBlock) Forward(s *module.Step, x *G.Node) *G.Node {
	if x != nil {
		checkChannels("BasicBlock", k.Name, x.Shape(), k.In, "make the block with in=%[1]d")
	}
	checkInput("BasicBlock", k.Name, x, fmt.Sprintf("[batch, %d, height, width]", k.In), -1, k.In, -1, -1)
	// A block always gives its input a gradient, even fed from the batch,
	// where a Conv2d skips it: with the identity shortcut x gets one
	// through the sum anyway, and conv1 must add its part or x's gradient
	// is silently partial. Blocks are not first layers in practice (every
	// block of ResNet is fed from the stem), so this costs nothing there.
	h := k.bn1.ForwardReLU(s, k.conv1.forward(s, x, true))
	h = k.conv2.Forward(s, h)
	// bn2, the shortcut's BatchNorm, the sum and the ReLU are one op: one
	// pass over memory instead of one per BatchNorm and one for the sum.
	bn2 := k.bn2.args(s, h)
	var out *G.Node
	if k.downConv == nil {
		out = must("BasicBlock", k.Name)(ops.BatchNormAddReLU(bn2, x))
	} else {
		d := k.downConv.forward(s, x, true)
		out = must("BasicBlock", k.Name)(ops.BatchNormAddBatchNormReLU(bn2, k.downBN.args(s, d)))
		s.LayerIO(k.downBN.Name, d, out)
	}
	s.LayerIO(k.bn2.Name, h, out)
	return layerIO(s, k.Name, x, out)
}

// ResNetConfig describes a CIFAR-style ResNet: a 3x3 stem, stages of
// BasicBlocks (the first block of every stage after the first has stride 2),
// global average pooling and a linear classifier. The zero value is the
// resnet8 workload of BENCHMARKS.md for Fashion-MNIST.
type ResNetConfig struct {
	InChannels int   // 0: 1
	NumClasses int   // 0: 10
	Widths     []int // channels per stage; nil: 16, 32, 64
	// BlocksPerStage: 0 means 1 (resnet8); 3 gives ResNet-20, 5 ResNet-32.
	BlocksPerStage int
	// InputGrad computes the gradient with respect to the input images
	// (saliency maps, adversarial examples). Off, the stem convolution
	// skips it, as training does not need it, and asking Gorgonia for it
	// fails ("Non Differentiable WRTs").
	InputGrad bool
}

func (c ResNetConfig) withDefaults() ResNetConfig {
	if c.InChannels == 0 {
		c.InChannels = 1
	}
	if c.NumClasses == 0 {
		c.NumClasses = 10
	}
	if c.Widths == nil {
		c.Widths = []int{16, 32, 64}
	}
	if c.BlocksPerStage == 0 {
		c.BlocksPerStage = 1
	}
	return c
}

// Validate reports every problem with c (after defaults) at once.
func (c ResNetConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.InChannels < 1 {
		errs = append(errs, fmt.Errorf("InChannels is %d: want 1 or more (1 for grey images, 3 for RGB)", c.InChannels))
	}
	if c.NumClasses < 1 {
		errs = append(errs, fmt.Errorf("NumClasses is %d: want 1 or more", c.NumClasses))
	}
	if len(c.Widths) == 0 {
		errs = append(errs, fmt.Errorf("Widths is empty: give one width per stage, as 16, 32, 64"))
	}
	for i, w := range c.Widths {
		if w < 1 {
			errs = append(errs, fmt.Errorf("Widths[%d] is %d: want 1 or more", i, w))
		}
	}
	if c.BlocksPerStage < 1 {
		errs = append(errs, fmt.Errorf("BlocksPerStage is %d: want 1 or more (1: resnet8, 3: ResNet-20)", c.BlocksPerStage))
	}
	if len(errs) > 0 {
		return fmt.Errorf("nn.ResNetConfig: %w", joinErrs(errs))
	}
	return nil
}

// ResNet is the network ResNetConfig describes. Parameter names follow
// torchvision: conv1, bn1, layer1.0.conv1, ..., fc.
type ResNet struct {
	Config ResNetConfig
	conv1  *Conv2d
	bn1    *BatchNorm
	blocks []*BasicBlock
	pool   *GlobalAvgPool2d
	fc     *Linear
}

// NewResNet declares the network's parameters and buffers on b.
func NewResNet(b *module.Builder, c ResNetConfig) *ResNet {
	if err := c.Validate(); err != nil {
		b.Errorf("%v", err)
		return &ResNet{Config: c}
	}
	c = c.withDefaults()
	r := &ResNet{Config: c}
	r.conv1 = NewConv2d(b, "conv1", Conv2dConfig{In: c.InChannels, Out: c.Widths[0], Kernel: 3, Padding: 1, NoBias: true, InputGrad: c.InputGrad})
	r.bn1 = NewBatchNorm2d(b, "bn1", c.Widths[0])
	in := c.Widths[0]
	for st, w := range c.Widths {
		for i := 0; i < c.BlocksPerStage; i++ {
			stride := 1
			if st > 0 && i == 0 {
				stride = 2
			}
			r.blocks = append(r.blocks, NewBasicBlock(b, fmt.Sprintf("layer%d.%d", st+1, i), in, w, stride))
			in = w
		}
	}
	r.pool = NewGlobalAvgPool2d(b, "avgpool")
	r.fc = NewLinear(b, "fc", in, c.NumClasses)
	return r
}

// MinSize is the smallest image side the network accepts: every stride-2
// stage must halve an image of at least 2 pixels.
func (r *ResNet) MinSize() int { return 1 << (len(r.Config.withDefaults().Widths) - 1) }

// Forward returns the logits [batch, NumClasses] of x [batch, InChannels,
// H, W].
func (r *ResNet) Forward(s *module.Step, x *G.Node) *G.Node {
	if r.conv1 == nil {
		panic(fmt.Errorf("nn.ResNet: the configuration is invalid: %v", r.Config.Validate()))
	}
	c := r.Config
	checkInput("ResNet", "", x, fmt.Sprintf("[batch, %d, height, width]", c.InChannels), -1, c.InChannels, -1, -1)
	if sh := x.Shape(); sh[2] < r.MinSize() || sh[3] < r.MinSize() {
		panic(fmt.Errorf("nn.ResNet: input %v is %dx%d, too small for %d stride-2 stages: images must be at least %dx%d",
			sh, sh[2], sh[3], len(c.Widths)-1, r.MinSize(), r.MinSize()))
	}
	h := r.bn1.ForwardReLU(s, r.conv1.Forward(s, x))
	for _, k := range r.blocks {
		h = k.Forward(s, h)
	}
	return r.fc.Forward(s, r.pool.Forward(s, h))
}
