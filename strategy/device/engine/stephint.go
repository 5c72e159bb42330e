package engine

import (
	"fmt"
	"strings"

	"gorgonia.org/tensor"
)

// dtypeHint says what to change when a step's graph failed Gorgonia's type
// unification between float32 and float64: almost always a constant made
// from a Go float64 (G.NewConstant(math.Sqrt(d)), as `x / math.sqrt(d)` is
// written in PyTorch) in a float32 model, or a float32 one in a float64
// model. "" when msg is no such failure.
func dtypeHint(msg string, model tensor.Dtype) string {
	if !strings.Contains(msg, "cannot be unified") || !strings.Contains(msg, "float32") || !strings.Contains(msg, "float64") {
		return ""
	}
	other, precision, conv := tensor.Float64, "32", "float32"
	if model == tensor.Float64 {
		other, precision, conv = tensor.Float32, "64", "float64"
	}
	return fmt.Sprintf("a %v value meets the model's %v ones (Config.Precision %q): make every constant of the step in the model's dtype, s.Dtype(): G.NewConstant(%s(v)) here, or switch on s.Dtype() in a model that runs in both", other, model, precision, conv)
}

// matMulHint says what to use when G.Mul was given a tensor of more than
// two axes: a PyTorch user's q @ k.transpose(1, 2) is G.BatchedMatMul.
func matMulHint(msg string) string {
	if !strings.Contains(msg, "Mul not yet implemented for a (") {
		return ""
	}
	return "G.Mul multiplies vectors and matrices only: for PyTorch's @ (torch.matmul) over a batch of matrices, [batch, n, k] by [batch, k, m], use G.BatchedMatMul(a, b) (G.BatchedMatMul(q, k, false, true) for q·kᵀ)"
}

// withHint wraps err, a step's failure, with the advice of dtypeHint or
// matMulHint where one applies.
func withHint(err error, model tensor.Dtype) error {
	msg := err.Error()
	for _, h := range []string{dtypeHint(msg, model), matMulHint(msg)} {
		if h != "" {
			return fmt.Errorf("%s: %w", h, err)
		}
	}
	return err
}
