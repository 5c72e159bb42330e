package ops

import (
	"fmt"
	"math/rand/v2"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Dropout zeroes each element of x with probability p and scales the rest by
// 1/(1-p) (inverted dropout), drawing a fresh mask at every run from a
// generator seeded with seed: the same seed gives the same sequence of masks.
// It is the training-graph half of dropout; in an eval graph, use x itself
// (Gorgonia v0.9.17's Dropout has no eval mode; nn.Dropout does this).
func Dropout(x *G.Node, p float64, seed uint64) (*G.Node, error) {
	return DropoutKeyed(x, p, seed, nil)
}

// DropoutKeyed is Dropout whose mask at each run is a function of (seed,
// *key) alone, where key is read when the op runs (module.Step.RunKey: the
// trainer's epoch and batch). Masks then do not depend on how many runs came
// before, so a run resumed from a checkpoint draws the masks the
// uninterrupted run drew. A nil key gives Dropout's running sequence.
func DropoutKeyed(x *G.Node, p float64, seed uint64, key *uint64) (*G.Node, error) {
	if err := checkFloat("Dropout input", x); err != nil {
		return nil, err
	}
	if !(p >= 0 && p <= 1) {
		return nil, fmt.Errorf("Dropout probability %v: want 0 ≤ p ≤ 1", p)
	}
	op := &dropoutOp{base: newBase("Dropout"), p: p, seed: seed, key: key, shape: x.Shape().Clone()}
	op.rng = rand.New(&op.pcg)
	op.pcg.Seed(seed, 0xda3e39cb94b95bdb)
	// Keep an element when a uniform 32-bit draw is at least p·2³².
	op.threshold = uint64(p * (1 << 32))
	if p < 1 {
		op.scale = 1 / (1 - p)
	}
	return apply(op, x)
}

type dropoutOp struct {
	base
	p         float64
	seed      uint64
	key       *uint64
	shape     tensor.Shape
	pcg       rand.PCG
	rng       *rand.Rand
	threshold uint64
	scale     float64
	out       buffer
	mask      any // []T: 0 or scale per element, of the last run
	fixed     bool
}

func (op *dropoutOp) Arity() int                                     { return 1 }
func (op *dropoutOp) Type() hm.Type                                  { return fnType(len(op.shape), len(op.shape)) }
func (op *dropoutOp) DiffWRT(int) []bool                             { return []bool{true} }
func (op *dropoutOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }

func (op *dropoutOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	x, err := dense(op, "input", v[0], dt, op.shape)
	if err != nil {
		return nil, err
	}
	switch {
	case op.fixed: // tests: the same mask at every run
		op.pcg.Seed(op.seed, 0xda3e39cb94b95bdb)
	case op.key != nil:
		op.pcg.Seed(op.seed, *op.key^0xda3e39cb94b95bdb)
	}
	y := op.out.get(dt, op.shape)
	if dt == tensor.Float32 {
		dropout(op, data[float32](x), data[float32](y), scratch[float32](&op.mask, len(data[float32](x))))
	} else {
		dropout(op, data[float64](x), data[float64](y), scratch[float64](&op.mask, len(data[float64](x))))
	}
	return y, nil
}

func dropout[T float](op *dropoutOp, x, y, mask []T) {
	s := T(op.scale)
	for i := 0; i < len(x); i += 2 {
		r := op.rng.Uint64()
		for k := 0; k < 2 && i+k < len(x); k++ {
			m := s
			if r&0xffffffff < op.threshold {
				m = 0
			}
			r >>= 32
			mask[i+k] = m
			y[i+k] = x[i+k] * m
		}
	}
}

func (op *dropoutOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := apply(&dropoutGradOp{base: newBase("DropoutGrad"), fwd: op}, output, grad)
	return G.Nodes{d}, err
}

// dropoutGradOp is dy times the forward run's mask: (y, dy) → like x.
type dropoutGradOp struct {
	base
	noDiff
	fwd *dropoutOp
	out buffer
}

func (op *dropoutGradOp) Arity() int { return 2 }
func (op *dropoutGradOp) Type() hm.Type {
	d := len(op.fwd.shape)
	return fnType(d, d, d)
}
func (op *dropoutGradOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *dropoutGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.fwd.shape.Clone(), nil
}

func (op *dropoutGradOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[1].Dtype()
	dy, err := dense(op, "output gradient", v[1], dt, op.fwd.shape)
	if err != nil {
		return nil, err
	}
	dx := op.out.get(dt, op.fwd.shape)
	if dt == tensor.Float32 {
		mulInto(data[float32](dy), op.fwd.mask.([]float32), data[float32](dx))
	} else {
		mulInto(data[float64](dy), op.fwd.mask.([]float64), data[float64](dx))
	}
	return dx, nil
}

func mulInto[T float](a, b, out []T) {
	b, out = b[:len(a)], out[:len(a)]
	for i, v := range a {
		out[i] = v * b[i]
	}
}

// Flatten reshapes x [N, ...] to [N, prod(...)], copying into an op-held
// buffer (a view would alias x's memory, which Gorgonia's in-place ops
// downstream may then overwrite while x is still needed).
func Flatten(x *G.Node) (*G.Node, error) {
	if err := checkFloat("Flatten input", x); err != nil {
		return nil, err
	}
	xs := x.Shape()
	if len(xs) < 2 {
		return nil, fmt.Errorf("Flatten input has shape %v: want [batch, ...] with at least 2 axes", xs)
	}
	return apply(&reshapeOp{base: newBase("Flatten"), from: xs.Clone(), to: tensor.Shape{xs[0], xs.TotalSize() / xs[0]}}, x)
}

// reshapeOp copies its input into a buffer of another shape with the same
// number of elements; its gradient is the reverse reshape.
type reshapeOp struct {
	base
	from, to tensor.Shape
	out      buffer
}

func (op *reshapeOp) Arity() int                                     { return 1 }
func (op *reshapeOp) Type() hm.Type                                  { return fnType(len(op.to), len(op.from)) }
func (op *reshapeOp) DiffWRT(int) []bool                             { return []bool{true} }
func (op *reshapeOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.to.Clone(), nil }

func (op *reshapeOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	x, err := dense(op, "input", v[0], dt, op.from)
	if err != nil {
		return nil, err
	}
	y := op.out.get(dt, op.to)
	if dt == tensor.Float32 {
		copy(data[float32](y), data[float32](x))
	} else {
		copy(data[float64](y), data[float64](x))
	}
	return y, nil
}

func (op *reshapeOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := apply(&reshapeOp{base: newBase(op.kind + "Grad"), from: op.to, to: op.from}, grad)
	return G.Nodes{d}, err
}
