package nn

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// PoolConfig is the window of MaxPool2d and AvgPool2d (square; zero Stride
// means Kernel, as in PyTorch).
type PoolConfig struct {
	Kernel, Stride, Padding int
	// ExcludePad leaves padding out of AvgPool2d's divisor
	// (count_include_pad=False).
	ExcludePad bool
	// CeilMode rounds the output size up (PyTorch's ceil_mode=True): a
	// last partial window is kept when it starts inside the input or its
	// left padding, as in PyTorch, and AvgPool2d divides it by the
	// positions it covers up to the far padding (count_include_pad) or in
	// the input (ExcludePad).
	CeilMode bool
}

func (c PoolConfig) opts() ops.PoolOpts {
	return ops.PoolOpts{Kernel: [2]int{c.Kernel, c.Kernel}, Stride: [2]int{c.Stride, c.Stride},
		Padding: [2]int{c.Padding, c.Padding}, ExcludePad: c.ExcludePad, CeilMode: c.CeilMode}
}

func (c PoolConfig) validate() error {
	if c.Kernel < 1 || c.Stride < 0 || c.Padding < 0 || 2*c.Padding > c.Kernel {
		return fmt.Errorf("kernel %d, stride %d, padding %d: want kernel ≥ 1, stride ≥ 0 (0: the kernel) and 0 ≤ padding ≤ kernel/2", c.Kernel, c.Stride, c.Padding)
	}
	return nil
}

// Pool2d is a max or average pooling layer.
type Pool2d struct {
	Name   string
	Config PoolConfig
	max    bool
}

// NewMaxPool2d is PyTorch's nn.MaxPool2d (ceil_mode is PoolConfig.CeilMode).
func NewMaxPool2d(b *module.Builder, name string, c PoolConfig) *Pool2d {
	return newPool(b, name, c, true)
}

// NewAvgPool2d is PyTorch's nn.AvgPool2d (ceil_mode is PoolConfig.CeilMode).
func NewAvgPool2d(b *module.Builder, name string, c PoolConfig) *Pool2d {
	return newPool(b, name, c, false)
}

func newPool(b *module.Builder, name string, c PoolConfig, isMax bool) *Pool2d {
	l := &Pool2d{Name: b.Name(name), Config: c, max: isMax}
	if err := c.validate(); err != nil {
		b.Errorf("nn.%s %q: %v", l.typ(), l.Name, err)
	}
	b.Scope(name).Layer(l.typ(), 0)
	return l
}

func (l *Pool2d) typ() string {
	if l.max {
		return "MaxPool2d"
	}
	return "AvgPool2d"
}

// Forward adds the pooling to s's graph; x must be [batch, C, H, W].
func (l *Pool2d) Forward(s *module.Step, x *G.Node) *G.Node {
	checkInput(l.typ(), l.Name, x, "[batch, channels, height, width]", -1, -1, -1, -1)
	if l.max {
		return layerIO(s, l.Name, x, must(l.typ(), l.Name)(ops.MaxPool2d(x, l.Config.opts())))
	}
	return layerIO(s, l.Name, x, must(l.typ(), l.Name)(ops.AvgPool2d(x, l.Config.opts())))
}

// GlobalAvgPool2d averages each channel over height and width: [N, C, H, W]
// to [N, C] (PyTorch's AdaptiveAvgPool2d(1) followed by flatten).
type GlobalAvgPool2d struct{ Name string }

// NewGlobalAvgPool2d records the layer for summaries.
func NewGlobalAvgPool2d(b *module.Builder, name string) *GlobalAvgPool2d {
	b.Scope(name).Layer("GlobalAvgPool2d", 0)
	return &GlobalAvgPool2d{Name: b.Name(name)}
}

// Forward adds the pooling to s's graph.
func (l *GlobalAvgPool2d) Forward(s *module.Step, x *G.Node) *G.Node {
	checkInput("GlobalAvgPool2d", l.Name, x, "[batch, channels, height, width]", -1, -1, -1, -1)
	return layerIO(s, l.Name, x, must("GlobalAvgPool2d", l.Name)(ops.GlobalAvgPool2d(x)))
}
