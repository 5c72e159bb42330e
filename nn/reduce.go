package nn

import (
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/nn/ops"
)

// Sum is PyTorch's torch.sum(x, dim=axes): x summed over the given axes,
// which leave the shape (keepdim=False); over every axis, into a scalar,
// when none is given. Negative axes count from the end, as in PyTorch. Use
// it instead of Gorgonia's G.Sum, whose reduction over a middle axis is
// wrong for some shapes in v0.9.17 (the engine rewrites or refuses those;
// see package engine). It panics, naming the axes and the shape, when an
// axis is out of range or repeated; the trainer turns the panic into an
// error of the step being built.
func Sum(x *G.Node, axes ...int) *G.Node { return reduce("Sum", x, axes, false) }

// Mean is PyTorch's torch.mean(x, dim=axes), as Sum: Mean(x, 2, 3) of
// [N, C, H, W] is the global average pool, [N, C].
func Mean(x *G.Node, axes ...int) *G.Node { return reduce("Mean", x, axes, true) }

func reduce(name string, x *G.Node, axes []int, mean bool) *G.Node {
	if x == nil {
		panic(fmt.Errorf("nn.%s: input is nil", name))
	}
	s := x.Shape()
	dims := x.Dims()
	norm := make([]int, len(axes))
	for i, a := range axes {
		if a < 0 {
			a += dims
		}
		if a < 0 || a >= dims {
			panic(fmt.Errorf("nn.%s: axis %d is out of range for shape %v (%d axes: use 0 to %d, or -%d to -1)", name, axes[i], s, dims, dims-1, dims))
		}
		if slices.Contains(norm[:i], a) {
			panic(fmt.Errorf("nn.%s: axis %d is given twice in %v", name, a, axes))
		}
		norm[i] = a
	}
	if len(norm) == 0 || len(norm) == dims {
		f := ops.SumAll
		if mean {
			f = ops.MeanAll
		}
		return mustOp(name)(f(x))
	}
	// One axis at a time, the last first, so that the others keep their
	// places.
	slices.Sort(norm)
	f := ops.SumAxis
	if mean {
		f = ops.MeanAxis
	}
	for i := len(norm) - 1; i >= 0; i-- {
		x = mustOp(name)(f(x, norm[i]))
	}
	return x
}

func mustOp(name string) func(*G.Node, error) *G.Node {
	return func(n *G.Node, err error) *G.Node {
		if err != nil {
			panic(fmt.Errorf("nn.%s: %w", name, err))
		}
		return n
	}
}
