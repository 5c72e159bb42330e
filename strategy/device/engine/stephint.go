package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/ops"
)

// dtypeHint says what to change when a step's graph failed Gorgonia's type
// unification between float32 and float64: almost always a constant made
// from a Go float64 (G.NewConstant(math.Sqrt(d)), as `x / math.sqrt(d)` is
// written in PyTorch) in a float32 model, or a float32 one in a float64
// model. "" when msg is no such failure. settingName names the precision
// setting (WithSettingName's; nil: Config.Precision).
func dtypeHint(msg string, model tensor.Dtype, settingName func(string) string) string {
	if !strings.Contains(msg, "cannot be unified") || !strings.Contains(msg, "float32") || !strings.Contains(msg, "float64") {
		return ""
	}
	other, precision, conv := tensor.Float64, "32", "float32"
	if model == tensor.Float64 {
		other, precision, conv = tensor.Float32, "64", "float64"
	}
	return fmt.Sprintf("a %v value meets the model's %v ones (%s): make every constant of the step in the model's dtype, s.Dtype(): G.NewConstant(%s(v)) here, or switch on s.Dtype() in a model that runs in both", other, model, precisionSetting(precision, settingName), conv)
}

// precisionSetting is the precision setting at value ("32", "64") as
// settingName (WithSettingName's) names it: Config.Precision "64" without
// one, "-precision 64" for a cli.
func precisionSetting(value string, settingName func(string) string) string {
	if settingName != nil {
		if n := settingName("Precision"); n != "" {
			return n + " " + value
		}
	}
	return fmt.Sprintf("Config.Precision %q", value)
}

// float64Hint names the setting that makes a float64 model when the step
// failed with ops.ErrNeedsFloat64 (an op that float32 cannot run exactly);
// "" otherwise.
func float64Hint(err error, settingName func(string) string) string {
	if !errors.Is(err, ops.ErrNeedsFloat64) {
		return ""
	}
	return "set " + precisionSetting("64", settingName)
}

// matMulHint says what to use when G.Mul was given a tensor of more than
// two axes: a PyTorch user's q @ k.transpose(1, 2) is G.BatchedMatMul.
func matMulHint(msg string) string {
	if !strings.Contains(msg, "Mul not yet implemented for a (") {
		return ""
	}
	return "G.Mul multiplies vectors and matrices only: for PyTorch's @ (torch.matmul) over a batch of matrices, [batch, n, k] by [batch, k, m], use G.BatchedMatMul(a, b) (G.BatchedMatMul(q, k, false, true) for q·kᵀ)"
}

// logSumExpHint says what to use when G.LogSumExp failed to build: for a
// tensor of two axes or more, Gorgonia v0.9.17 subtracts the max along the
// axis from the input without a broadcast. The failure is that Sub's shape
// error, of the input and the input with one axis left out.
func logSumExpHint(msg string) string {
	_, shapes, ok := strings.Cut(msg, "Operation failed: Failed to infer shape. Op: - false: Shape mismatch: ")
	if !ok {
		return ""
	}
	var in, max []int
	a, b, ok := strings.Cut(shapes, " and ")
	if !ok || !parseShape(a, &in) || !parseShape(b, &max) || len(in) < 2 || len(max) != len(in)-1 {
		return ""
	}
	for axis := range in {
		rest := append(append([]int(nil), in[:axis]...), in[axis+1:]...)
		if fmt.Sprint(rest) == fmt.Sprint(max) {
			return fmt.Sprintf("G.LogSumExp of a tensor of two axes or more fails to build in Gorgonia v0.9.17 (it subtracts the max along the axis, %s, from the %s input without a broadcast): %s",
				strings.TrimSpace(strings.SplitN(b, ")", 2)[0]+")"), strings.TrimSpace(a), logSumExpFix)
		}
	}
	return ""
}

// parseShape reads "(4, 5)" at the start of s into out.
func parseShape(s string, out *[]int) bool {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "(") {
		return false
	}
	end := strings.Index(s, ")")
	if end < 0 {
		return false
	}
	for _, f := range strings.Split(s[1:end], ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return false
		}
		*out = append(*out, n)
	}
	return true
}

// withHint wraps err, a step's failure, with the advice of float64Hint,
// dtypeHint, matMulHint or logSumExpHint where one applies.
func withHint(err error, model tensor.Dtype, settingName func(string) string) error {
	msg := err.Error()
	for _, h := range []string{float64Hint(err, settingName), dtypeHint(msg, model, settingName), matMulHint(msg), logSumExpHint(msg)} {
		if h != "" {
			return fmt.Errorf("%s: %w", h, err)
		}
	}
	return err
}
