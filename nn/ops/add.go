package ops

import (
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// AddInto writes a + b into dst and reports true when all three are dense,
// contiguous tensors (not views) of one float dtype and one shape; else it
// writes nothing and reports false, and the caller adds another way. It is
// for the gradient sums Gorgonia's differentiation inserts where a value
// feeds several ops (a residual block's input feeds its convolution and
// its shortcut): Gorgonia's own Add copies a into dst and then adds b, on
// one goroutine, which took about 0.6 ms a sum at resnet8's first stage
// (64x16x28x28), three such sums a step. Here it is one pass, split
// between the loop workers as the activations are, 16 lanes at a time
// for float32 where the CPU has AVX-512; every element is a[i] + b[i]
// rounded once, the same bits as Gorgonia's.
func AddInto(dst, a, b G.Value) bool {
	d, ok1 := dst.(*tensor.Dense)
	x, ok2 := a.(*tensor.Dense)
	y, ok3 := b.(*tensor.Dense)
	if !ok1 || !ok2 || !ok3 || d.IsView() || x.IsView() || y.IsView() {
		return false
	}
	dt := d.Dtype()
	if x.Dtype() != dt || y.Dtype() != dt || !x.Shape().Eq(d.Shape()) || !y.Shape().Eq(d.Shape()) {
		return false
	}
	switch dt {
	case tensor.Float32:
		return addDense(data[float32](x), data[float32](y), data[float32](d), d.Shape().TotalSize())
	case tensor.Float64:
		return addDense(data[float64](x), data[float64](y), data[float64](d), d.Shape().TotalSize())
	}
	return false
}

// Copy copies src into dst, as the built-in copy (it returns the number of
// elements copied, the shorter length), split between the loop workers
// when there are many: the engine binds each batch's fields into its
// input tensors with it, where a layer's target of a million values was a
// single-threaded copy of each step.
func Copy[T float32 | float64](dst, src []T) int {
	n := min(len(dst), len(src))
	if w := workers(n, 1); w > 1 {
		parallelLoop(loopCopy, w, n, src[:n], nil, dst[:n], loopArgs{})
		return n
	}
	return copy(dst, src)
}

// SumInputDoer is an op that can take one input as the sum of two values,
// adding them in its own pass over memory: an executor that finds
// Gorgonia's Add read by such an op alone can skip the Add and hand the op
// its two summands. The masked-gradient op of BatchNorm+ReLU and of
// BatchNormAddReLU is one: the gradient of a residual block's input, the
// sum of its convolution's and its shortcut's, feeds the previous block's.
type SumInputDoer interface {
	G.Op
	// SumInput is the index of the input that may come as two summands.
	SumInput() int
	// DoSum is Do with v[SumInput()] replaced by a + b, of the same shape
	// and dtype (v[SumInput()] is not read): the same bits.
	DoSum(a, b G.Value, v ...G.Value) (G.Value, error)
}

func addDense[T float](a, b, y []T, n int) bool {
	if len(a) < n || len(b) < n || len(y) < n {
		return false
	}
	addPar(a[:n], b[:n], y[:n])
	return true
}

// add writes y[i] = a[i] + b[i].
func add[T float](a, b, y []T) {
	b, y = b[:len(a)], y[:len(a)]
	if is32[T]() && (useAVX512 || useAVX2) && len(a) > 0 {
		if useAVX512 {
			add32(f32p(a), f32p(b), f32p(y), len(a))
		} else {
			add32AVX2(f32p(a), f32p(b), f32p(y), len(a))
		}
		return
	}
	for i, v := range a {
		y[i] = v + b[i]
	}
}

func addPar[T float](a, b, y []T) {
	if w := workers(len(a), 1); w > 1 {
		parallelLoop(loopAdd, w, len(a), a, b, y, loopArgs{})
		return
	}
	add(a, b, y)
}
