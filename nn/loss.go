package nn

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/nn/ops"
)

// Reduction says how a loss combines its elements, as PyTorch's reduction
// argument: ReduceMean (the default), ReduceSum or ReduceNone.
type Reduction = ops.Reduction

const (
	ReduceMean = ops.ReduceMean // mean over every element
	ReduceSum  = ops.ReduceSum  // sum over every element
	ReduceNone = ops.ReduceNone // one loss per element, in the input's shape
)

// LossOption changes a loss's settings.
type LossOption func(*ops.PointLossConfig)

// WithReduction sets how the elements' losses are combined (default ReduceMean).
func WithReduction(r Reduction) LossOption {
	return func(c *ops.PointLossConfig) { c.Reduction = r }
}

// PosWeight weighs the positive term of BCEWithLogitsLoss, as PyTorch's
// pos_weight: one value for every element, or one per entry of the last
// axis (per class).
func PosWeight(w ...float64) LossOption {
	return func(c *ops.PointLossConfig) { c.PosWeight = append([]float64(nil), w...) }
}

// MSELoss is the squared error (x-y)² of input against target (same shape),
// reduced as PyTorch's nn.MSELoss. Only the input gets a gradient.
func MSELoss(input, target *G.Node, opts ...LossOption) *G.Node {
	return pointLoss(ops.LossMSE, 0, input, target, opts)
}

// L1Loss is the absolute error |x-y|, as PyTorch's nn.L1Loss (gradient 0
// where x = y).
func L1Loss(input, target *G.Node, opts ...LossOption) *G.Node {
	return pointLoss(ops.LossL1, 0, input, target, opts)
}

// SmoothL1Loss is 0.5(x-y)²/β where |x-y| < β and |x-y| - 0.5β elsewhere,
// as PyTorch's nn.SmoothL1Loss(beta=β) (PyTorch's default β is 1; β = 0 is
// L1Loss).
func SmoothL1Loss(input, target *G.Node, beta float64, opts ...LossOption) *G.Node {
	return pointLoss(ops.LossSmoothL1, beta, input, target, opts)
}

// HuberLoss is 0.5(x-y)² where |x-y| < δ and δ(|x-y| - 0.5δ) elsewhere, as
// PyTorch's nn.HuberLoss(delta=δ) (default δ 1; equal to δ·SmoothL1Loss with
// β = δ).
func HuberLoss(input, target *G.Node, delta float64, opts ...LossOption) *G.Node {
	return pointLoss(ops.LossHuber, delta, input, target, opts)
}

// BCEWithLogitsLoss is the binary cross-entropy of sigmoid(logits) against
// targets in [0, 1] (same shape), computed from the logits without
// overflow, as PyTorch's nn.BCEWithLogitsLoss; PosWeight gives pos_weight.
func BCEWithLogitsLoss(logits, targets *G.Node, opts ...LossOption) *G.Node {
	return pointLoss(ops.LossBCEWithLogits, 0, logits, targets, opts)
}

func pointLoss(kind ops.LossKind, param float64, x, y *G.Node, opts []LossOption) *G.Node {
	if x == nil || y == nil {
		panic(fmt.Errorf("nn.%v: input or target is nil", kind))
	}
	cfg := ops.PointLossConfig{Kind: kind, Param: param}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := ops.PointLoss(x, y, cfg)
	if err != nil {
		panic(fmt.Errorf("nn.%w", err))
	}
	return n
}
