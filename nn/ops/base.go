package ops

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"sync/atomic"
	"unsafe"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/blas"
)

// float is the element type of every kernel here.
type float interface{ ~float32 | ~float64 }

var lastID atomic.Uint64

// base is embedded by every op: identity (unique hash), name, and the
// analysis answers shared by all of them.
type base struct {
	id   uint64
	kind string
}

func newBase(kind string) base { return base{id: lastID.Add(1), kind: kind} }

// fulgurOp is satisfied by every op of this package (tests use it to find them).
type fulgurOp interface{ self() *base }

func (b *base) self() *base { return b }

// WriteHash includes the instance id: Gorgonia merges nodes whose ops hash
// alike (common subexpression elimination), which for ops holding buffers
// and caches would silently share them between layers.
func (b *base) WriteHash(h hash.Hash) { fmt.Fprintf(h, "fulgur.%s#%d", b.kind, b.id) }
func (b *base) Hashcode() uint32 {
	h := fnv.New32a()
	b.WriteHash(h)
	return h.Sum32()
}
func (b *base) String() string { return fmt.Sprintf("%s#%d", b.kind, b.id) }

// ReturnsPtr is false: outputs are op-held buffers, not views of inputs, so
// Gorgonia gives each its own register and never preallocates for it.
func (b *base) ReturnsPtr() bool     { return false }
func (b *base) CallsExtern() bool    { return false }
func (b *base) OverwritesInput() int { return -1 }

// noDiff is embedded by ops with no gradient (backward ops, metrics). It
// answers DiffWRT with an all-false slice rather than none, which Gorgonia's
// backward analysis would otherwise treat as a dead end of the graph.
type noDiff struct{ arity int }

func (n noDiff) DiffWRT(int) []bool { return make([]bool, n.arity) }
func (n noDiff) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, errors.New("fulgur ops: second-order gradients are not supported")
}

// tensorType is the hm type of a tensor of dims dimensions over a.
func tensorType(dims int, a hm.Type) hm.Type {
	if dims == 0 {
		return a
	}
	return &G.TensorType{Dims: dims, Of: a}
}

// fnType builds an op type from input and output dimensions, all over one
// dtype variable.
func fnType(out int, in ...int) hm.Type {
	a := hm.TypeVariable('a')
	ts := make([]hm.Type, 0, len(in)+1)
	for _, d := range in {
		ts = append(ts, tensorType(d, a))
	}
	ts = append(ts, tensorType(out, a))
	return hm.NewFnType(ts...)
}

func checkFloat(what string, n *G.Node) error {
	if n == nil {
		return fmt.Errorf("%s is nil", what)
	}
	if dt := n.Dtype(); dt != tensor.Float32 && dt != tensor.Float64 {
		return fmt.Errorf("%s has dtype %v: use float32 or float64", what, dt)
	}
	return nil
}

// isFloat reports whether n is float32 or float64.
func isFloat(n *G.Node) bool {
	dt := n.Dtype()
	return dt == tensor.Float32 || dt == tensor.Float64
}

func sameDtype(what string, a, b *G.Node) error {
	if a.Dtype() != b.Dtype() {
		return fmt.Errorf("%s has dtype %v but the input has %v: use one dtype throughout a graph", what, b.Dtype(), a.Dtype())
	}
	return nil
}

func shapeOf(d G.DimSizer) tensor.Shape {
	s, _ := d.(tensor.Shape)
	return s
}

// dense returns v as a contiguous *tensor.Dense of dtype dt and the wanted
// shape; what (a name) makes the error say which input is wrong.
func dense(op fmt.Stringer, what string, v G.Value, dt tensor.Dtype, want tensor.Shape) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("%v: %s is a %T: want a *tensor.Dense", op, what, v)
	}
	if d.Dtype() != dt {
		return nil, fmt.Errorf("%v: %s has dtype %v, want %v", op, what, d.Dtype(), dt)
	}
	if want != nil && !d.Shape().Eq(want) {
		// Copy want so that it does not escape: callers pass shape literals.
		return nil, fmt.Errorf("%v: %s has shape %v, want %v", op, what, d.Shape(), append(tensor.Shape(nil), want...))
	}
	if d.RequiresIterator() {
		d = d.Materialize().(*tensor.Dense)
	}
	return d, nil
}

// data is d's elements as []T without boxing (Dense.Data goes through
// reflect and allocates); it also works for scalar tensors.
func data[T float](d *tensor.Dense) []T {
	var z T
	if unsafe.Sizeof(z) == 4 {
		s := d.Float32s()
		return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
	}
	s := d.Float64s()
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// scalarOf reads a scalar Value (the gradient Gorgonia seeds a loss with, or
// one produced by an op) without boxing it.
func scalarOf(v G.Value) (float64, error) {
	switch s := v.(type) {
	case *G.F32:
		return float64(*s), nil
	case *G.F64:
		return float64(*s), nil
	case *tensor.Dense:
		if s.Shape().TotalSize() == 1 {
			switch x := s.Data().(type) {
			case []float32:
				return float64(x[0]), nil
			case []float64:
				return x[0], nil
			case float32:
				return float64(x), nil
			case float64:
				return x, nil
			}
		}
	}
	return 0, fmt.Errorf("want a scalar float, got %T with shape %v", v, v.Shape())
}

// buffer is an op-held output tensor, allocated at the first run and reused
// after. Callers overwrite it completely each run. During UsePreallocDo,
// into is the caller's tensor and get returns it instead when it fits.
type buffer struct{ d, into *tensor.Dense }

func (b *buffer) get(dt tensor.Dtype, shape tensor.Shape) *tensor.Dense {
	if p := b.into; p != nil && p.Dtype() == dt && p.Shape().Eq(shape) && !p.RequiresIterator() {
		return p
	}
	if b.d != nil && b.d.Dtype() == dt {
		if b.d.Shape().Eq(shape) {
			return b.d
		}
		// A downstream Gorgonia op may have reshaped the tensor in place
		// (reshapeOp.UnsafeDo does): restore the shape, keep the memory.
		if b.d.Shape().TotalSize() == shape.TotalSize() && b.d.Reshape(append([]int(nil), shape...)...) == nil {
			return b.d
		}
	}
	b.d = tensor.New(tensor.Of(dt), tensor.WithShape(shape.Clone()...))
	return b.d
}

// scalarBuffer is an op-held scalar output.
type scalarBuffer struct {
	f32 G.F32
	f64 G.F64
}

func (s *scalarBuffer) set(dt tensor.Dtype, v float64) G.Value {
	if dt == tensor.Float32 {
		s.f32 = G.F32(v)
		return &s.f32
	}
	s.f64 = G.F64(v)
	return &s.f64
}

// scratch is a reusable slice of T.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// gemm is c = alpha·op(a)·op(b) + beta·c for either float type, with no
// run-time type switch: the branch is a constant per instantiation.
func gemm[T float](tA, tB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if unsafe.Sizeof(alpha) == 4 {
		blas.Sgemm(tA, tB, m, n, k, float32(alpha), f32s(a), lda, f32s(b), ldb, float32(beta), f32s(c), ldc)
		return
	}
	blas.Dgemm(tA, tB, m, n, k, float64(alpha), f64s(a), lda, f64s(b), ldb, float64(beta), f64s(c), ldc)
}

func f32s[T float](s []T) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}
func f64s[T float](s []T) []float64 {
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// apply is G.ApplyOp with the op's name on failure.
func apply(op G.Op, children ...*G.Node) (*G.Node, error) {
	n, err := G.ApplyOp(op, children...)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", op, err)
	}
	return n, nil
}

// prealloc makes the op of buffer b write its next output into p (a
// *tensor.Dense of the output's dtype and shape) instead of its own buffer:
// how an executor lands parameter gradients straight in the store. A p that
// does not fit is ignored and the op's own buffer is used as usual; release
// ends it.
func (b *buffer) prealloc(p G.Value) {
	b.into, _ = p.(*tensor.Dense)
}

func (b *buffer) release() { b.into = nil }
