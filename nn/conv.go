package nn

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// Conv2dConfig describes a Conv2d. Kernel is required; zero Stride and
// Dilation mean 1. The *HW fields, when set, give different (height, width)
// values and override the square ones.
type Conv2dConfig struct {
	In, Out                           int // channels
	Kernel, Stride, Padding, Dilation int
	KernelHW, StrideHW, PaddingHW     [2]int
	DilationHW                        [2]int
	// NoBias leaves out the bias (right before a BatchNorm).
	NoBias bool
	// InputGrad computes the input gradient even when the input depends on
	// no parameter (by default it is skipped there, as for a first layer).
	InputGrad bool
	// Groups is PyTorch's groups (0 means 1): the channels are split into
	// Groups groups, each output group convolving only its input group,
	// so In and Out must be multiples of it and the weight is
	// [Out, In/Groups, kh, kw]. Groups = In is a depthwise convolution
	// (MobileNet; Out = k·In for a depth multiplier k), 1 < Groups < In a
	// grouped one (ResNeXt).
	Groups int
}

func hw(square int, pair [2]int) [2]int {
	if pair != [2]int{} {
		return pair
	}
	return [2]int{square, square}
}

// Validate reports every problem with c at once.
func (c Conv2dConfig) Validate() error {
	var errs []string
	if c.In < 1 || c.Out < 1 {
		errs = append(errs, fmt.Sprintf("In=%d, Out=%d: channel counts must be 1 or more", c.In, c.Out))
	}
	k := hw(c.Kernel, c.KernelHW)
	if k[0] < 1 || k[1] < 1 {
		errs = append(errs, fmt.Sprintf("kernel %v: set Kernel (or KernelHW) to 1 or more", k))
	}
	for _, v := range []struct {
		what string
		v    [2]int
		min  int
	}{{"stride", hw(c.Stride, c.StrideHW), 0}, {"dilation", hw(c.Dilation, c.DilationHW), 0}, {"padding", hw(c.Padding, c.PaddingHW), 0}} {
		if v.v[0] < v.min || v.v[1] < v.min {
			errs = append(errs, fmt.Sprintf("%s %v must not be negative", v.what, v.v))
		}
	}
	if g := max(c.Groups, 1); c.Groups < 0 {
		errs = append(errs, fmt.Sprintf("Groups=%d: use 1 or more (0 means 1; In for a depthwise convolution)", c.Groups))
	} else if c.In >= 1 && c.Out >= 1 && (c.In%g != 0 || c.Out%g != 0) {
		errs = append(errs, fmt.Sprintf("Groups=%d with In=%d, Out=%d: In and Out must both be multiples of Groups", g, c.In, c.Out))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}

// Conv2d is PyTorch's nn.Conv2d: weight [Out, In/Groups, kh, kw], bias
// [Out], both initialised from U(±1/√(In/Groups·kh·kw)).
type Conv2d struct {
	Name   string
	Config Conv2dConfig
	Weight string
	Bias   string // "" without bias
}

// NewConv2d declares "name.weight" and, unless NoBias, "name.bias".
func NewConv2d(b *module.Builder, name string, c Conv2dConfig) *Conv2d {
	sb := b.Scope(name)
	l := &Conv2d{Name: b.Name(name), Config: c}
	if err := c.Validate(); err != nil {
		b.Errorf("nn.Conv2d %q: %v", l.Name, err)
		return l
	}
	k := hw(c.Kernel, c.KernelHW)
	in := c.In / max(c.Groups, 1)
	fanIn := in * k[0] * k[1]
	l.Weight = sb.Param("weight", []int{c.Out, in, k[0], k[1]}, module.KaimingUniform(fanIn))
	n := c.Out * fanIn
	if !c.NoBias {
		bound := 1 / math.Sqrt(float64(fanIn))
		l.Bias = sb.Param("bias", []int{c.Out}, module.Uniform(-bound, bound))
		n += c.Out
	}
	sb.Layer("Conv2d", n)
	return l
}

// Forward adds the convolution to s's graph; x must be [batch, In, H, W].
func (l *Conv2d) Forward(s *module.Step, x *G.Node) *G.Node { return l.forward(s, x, false) }

// forward is Forward, computing the input gradient whatever the input when
// inputGrad is set.
func (l *Conv2d) forward(s *module.Step, x *G.Node, inputGrad bool) *G.Node {
	c := l.Config
	if x != nil {
		checkChannels("Conv2d", l.Name, x.Shape(), c.In, "set Conv2dConfig.In to %[1]d")
	}
	checkInput("Conv2d", l.Name, x, fmt.Sprintf("[batch, %d, height, width]", c.In), -1, c.In, -1, -1)
	var bias *G.Node
	if l.Bias != "" {
		bias = s.Param(l.Bias)
	}
	return layerIO(s, l.Name, x, must("Conv2d", l.Name)(ops.Conv2d(x, s.Param(l.Weight), bias, ops.Conv2dOpts{
		Stride: hw(c.Stride, c.StrideHW), Padding: hw(c.Padding, c.PaddingHW), Dilation: hw(c.Dilation, c.DilationHW),
		NoInputGrad: !inputGrad && !c.InputGrad && !needsGrad(s, x), Groups: c.Groups,
	})))
}
