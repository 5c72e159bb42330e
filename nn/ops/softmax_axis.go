package ops

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// SoftmaxAxis is exp(x)/Σexp(x) along axis (negative counts from the end,
// as PyTorch's dim), computed stably with the maximum subtracted and the
// sums in float64.
func SoftmaxAxis(x *G.Node, axis int) (*G.Node, error) { return softmaxAxis("Softmax", x, axis, false) }

// LogSoftmaxAxis is x - logsumexp(x) along axis (negative counts from the
// end); LogSoftmax is LogSoftmaxAxis(x, -1).
func LogSoftmaxAxis(x *G.Node, axis int) (*G.Node, error) {
	return softmaxAxis("LogSoftmax", x, axis, true)
}

func softmaxAxis(kind string, x *G.Node, axis int, log bool) (*G.Node, error) {
	if err := checkFloat(kind+" input", x); err != nil {
		return nil, err
	}
	s := x.Shape()
	n := len(s)
	if x.IsScalar() || n == 0 {
		return nil, fmt.Errorf("%s input is a scalar: want at least one axis", kind)
	}
	a := axis
	if a < 0 {
		a += n
	}
	if a < 0 || a >= n {
		return nil, fmt.Errorf("%s: axis %d is out of range for input of shape %v: use 0..%d, or -%d..-1 counting from the end", kind, axis, s, n-1, n)
	}
	outer, c, inner := split(s, a)
	op := &softmaxAxisOp{base: newBase(kind), log: log, dims: n, outer: outer, c: c, inner: inner}
	return apply(op, x)
}

// softmaxAxisOp views its input as [outer, c, inner] and normalises over c.
type softmaxAxisOp struct {
	base
	log             bool
	dims            int
	outer, c, inner int
	out             buffer
}

func (op *softmaxAxisOp) Arity() int         { return 1 }
func (op *softmaxAxisOp) Type() hm.Type      { return fnType(op.dims, op.dims) }
func (op *softmaxAxisOp) DiffWRT(int) []bool { return []bool{true} }
func (op *softmaxAxisOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return shapeOf(in[0]).Clone(), nil
}

func (op *softmaxAxisOp) check(what string, d *tensor.Dense) error {
	if d.Shape().TotalSize() != op.outer*op.c*op.inner {
		return fmt.Errorf("%v: %s has shape %v: the graph was built for %d elements", op, what, d.Shape(), op.outer*op.c*op.inner)
	}
	return nil
}

func (op *softmaxAxisOp) Do(v ...G.Value) (G.Value, error) {
	x, err := dense(op, "input", v[0], v[0].Dtype(), nil)
	if err != nil {
		return nil, err
	}
	if err := op.check("input", x); err != nil {
		return nil, err
	}
	y := op.out.get(x.Dtype(), x.Shape())
	if x.Dtype() == tensor.Float32 {
		softmaxStrided(op, data[float32](x), data[float32](y))
	} else {
		softmaxStrided(op, data[float64](x), data[float64](y))
	}
	return y, nil
}

// softmaxStrided normalises each of the outer·inner lines of c elements,
// inner apart.
func softmaxStrided[T float](op *softmaxAxisOp, x, y []T) {
	c, inner := op.c, op.inner
	for o := 0; o < op.outer; o++ {
		for i := 0; i < inner; i++ {
			base := o*c*inner + i
			m := float64(x[base])
			for j := 1; j < c; j++ {
				m = max(m, float64(x[base+j*inner]))
			}
			var sum float64
			for j := 0; j < c; j++ {
				sum += math.Exp(float64(x[base+j*inner]) - m)
			}
			if op.log {
				lse := m + math.Log(sum)
				for j := 0; j < c; j++ {
					k := base + j*inner
					y[k] = T(float64(x[k]) - lse)
				}
				continue
			}
			for j := 0; j < c; j++ {
				k := base + j*inner
				y[k] = T(math.Exp(float64(x[k])-m) / sum)
			}
		}
	}
}

func (op *softmaxAxisOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := apply(&softmaxAxisGradOp{base: newBase(op.kind + "Grad"), fwd: op}, output, grad)
	return G.Nodes{d}, err
}

// softmaxAxisGradOp is (y, dy) → dx along the forward op's axis:
// y·(dy - Σ dy·y) for Softmax, dy - exp(y)·Σ dy for LogSoftmax.
type softmaxAxisGradOp struct {
	base
	noDiff
	fwd *softmaxAxisOp
	out buffer
}

func (op *softmaxAxisGradOp) Arity() int { return 2 }
func (op *softmaxAxisGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a, a)
}
func (op *softmaxAxisGradOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *softmaxAxisGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return shapeOf(in[0]).Clone(), nil
}

func (op *softmaxAxisGradOp) Do(v ...G.Value) (G.Value, error) {
	y, err := dense(op, "output", v[0], v[0].Dtype(), nil)
	if err != nil {
		return nil, err
	}
	if err := op.fwd.check("output", y); err != nil {
		return nil, err
	}
	dy, err := dense(op, "output gradient", v[1], y.Dtype(), y.Shape())
	if err != nil {
		return nil, err
	}
	dx := op.out.get(y.Dtype(), y.Shape())
	if y.Dtype() == tensor.Float32 {
		softmaxStridedGrad(op.fwd, data[float32](y), data[float32](dy), data[float32](dx))
	} else {
		softmaxStridedGrad(op.fwd, data[float64](y), data[float64](dy), data[float64](dx))
	}
	return dx, nil
}

func softmaxStridedGrad[T float](f *softmaxAxisOp, y, dy, dx []T) {
	c, inner := f.c, f.inner
	for o := 0; o < f.outer; o++ {
		for i := 0; i < inner; i++ {
			base := o*c*inner + i
			var sum float64
			for j := 0; j < c; j++ {
				k := base + j*inner
				if f.log {
					sum += float64(dy[k])
				} else {
					sum += float64(dy[k]) * float64(y[k])
				}
			}
			for j := 0; j < c; j++ {
				k := base + j*inner
				if f.log {
					dx[k] = T(float64(dy[k]) - math.Exp(float64(y[k]))*sum)
				} else {
					dx[k] = T(float64(y[k]) * (float64(dy[k]) - sum))
				}
			}
		}
	}
}
