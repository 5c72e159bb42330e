package module

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"
	"unsafe"

	"gorgonia.org/tensor"
)

// Entry locates one named tensor in a Store's flat buffer.
type Entry struct {
	Spec
	Offset int // first element in the flat buffer
	Len    int // number of elements
}

// Store holds all parameters and buffers of one replica in one flat,
// contiguous buffer. Learnable parameters come first, in declaration order,
// then buffers; the gradient buffer matches the learnable part exactly, so
// Data()[:NumParams()] and Grad() line up element for element.
type Store struct {
	dtype   tensor.Dtype
	entries []Entry
	index   map[string]int
	nParams int
	f32     []float32
	f64     []float64
	g32     []float32
	g64     []float64
	n       int // elements of all parameters and buffers

	// A layout store (NewLayoutStore) holds no parameters: their views show
	// scratch; buffers live in bufs (a store of the buffers alone).
	layout    bool
	seed      uint64
	bufs      *Store
	scratch32 []float32
	scratch64 []float64
}

// NewStore lays out specs, allocates the flat buffers and initialises every
// tensor from (seed, name), so two stores made with the same seed are equal
// bit for bit whatever order layers were declared in.
func NewStore(specs []Spec, dtype tensor.Dtype, seed uint64) (*Store, error) {
	return newStore(specs, dtype, seed, true)
}

// NewStoreWithoutGrad is NewStore without the gradient buffer: Grad32 and
// Grad64 are nil and GradTensor fails. It is for a replica whose
// gradients never gather in one buffer (a ZeRO-2 strategy hands each one
// over to a reduce-scatter as backward produces it, engine.Sharding), so
// that the rank does not hold a second model's worth of memory.
func NewStoreWithoutGrad(specs []Spec, dtype tensor.Dtype, seed uint64) (*Store, error) {
	return newStore(specs, dtype, seed, false)
}

func newStore(specs []Spec, dtype tensor.Dtype, seed uint64, grad bool) (*Store, error) {
	s, err := newLayout(specs, dtype)
	if err != nil {
		return nil, err
	}
	off := s.n
	var scratch []float64
	switch {
	case dtype == tensor.Float32 && grad:
		s.f32, s.g32 = make([]float32, off), make([]float32, s.nParams)
	case dtype == tensor.Float32:
		s.f32 = make([]float32, off)
	case grad:
		s.f64, s.g64 = make([]float64, off), make([]float64, s.nParams)
	default:
		s.f64 = make([]float64, off)
	}
	for _, e := range s.entries {
		if cap(scratch) < e.Len {
			scratch = make([]float64, e.Len)
		}
		v := scratch[:e.Len]
		for i := range v {
			v[i] = 0
		}
		if e.Init != nil {
			e.Init(rngFor(seed, e.Name), e.Shape, v)
		}
		if s.f32 != nil {
			narrow(span(s.f32, e), v)
		} else {
			narrow(span(s.f64, e), v)
		}
	}
	return s, nil
}

// narrow copies src into dst rounding to T (exactly, for float64).
func narrow[T float32 | float64](dst []T, src []float64) {
	for i, x := range src {
		dst[i] = T(x)
	}
}

// span is e's slice of a flat buffer, capped so appends cannot spill into
// the next tensor.
func span[T float32 | float64](buf []T, e Entry) []T {
	return buf[e.Offset : e.Offset+e.Len : e.Offset+e.Len]
}

// Dtype is tensor.Float32 or tensor.Float64.
func (s *Store) Dtype() tensor.Dtype { return s.dtype }

// Entries lists every tensor in store order (parameters, then buffers).
func (s *Store) Entries() []Entry { return s.entries }

// Lookup finds a tensor by name.
func (s *Store) Lookup(name string) (Entry, bool) {
	i, ok := s.index[name]
	if !ok {
		return Entry{}, false
	}
	return s.entries[i], true
}

// NumParams is the number of learnable elements (the length of Grad).
func (s *Store) NumParams() int { return s.nParams }

// Len is the number of elements of all parameters and buffers.
func (s *Store) Len() int { return s.n }

// Data32 is the flat buffer of a float32 store (nil otherwise).
func (s *Store) Data32() []float32 { return s.f32 }

// Data64 is the flat buffer of a float64 store (nil otherwise).
func (s *Store) Data64() []float64 { return s.f64 }

// Grad32 is the flat gradient buffer of a float32 store (nil otherwise).
func (s *Store) Grad32() []float32 { return s.g32 }

// Grad64 is the flat gradient buffer of a float64 store (nil otherwise).
func (s *Store) Grad64() []float64 { return s.g64 }

// Data is the flat buffer as []float32 or []float64.
func (s *Store) Data() any {
	if s.f32 != nil || s.dtype == tensor.Float32 {
		return s.f32
	}
	return s.f64
}

// Grad is the flat gradient buffer as []float32 or []float64.
func (s *Store) Grad() any {
	if s.dtype == tensor.Float32 {
		return s.g32
	}
	return s.g64
}

// Tensor returns a tensor viewing the named slice of the flat buffer: writes
// through it change the store, and the store's changes show in it.
func (s *Store) Tensor(name string) (*tensor.Dense, error) {
	e, ok := s.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("no tensor %q in the store", name)
	}
	return s.view(e, false), nil
}

// GradTensor is like Tensor for the gradient of a learnable parameter.
func (s *Store) GradTensor(name string) (*tensor.Dense, error) {
	e, ok := s.Lookup(name)
	if !ok || e.Buffer {
		return nil, fmt.Errorf("no learnable parameter %q in the store", name)
	}
	if s.layout {
		return nil, fmt.Errorf("gradient of %q: a layout store holds no gradients", name)
	}
	if s.g32 == nil && s.g64 == nil && s.nParams > 0 {
		return nil, fmt.Errorf("gradient of %q: the store was made without a gradient buffer (NewStoreWithoutGrad)", name)
	}
	return s.view(e, true), nil
}

func (s *Store) view(e Entry, grad bool) *tensor.Dense {
	shape := e.Shape
	if len(shape) == 0 {
		shape = []int{} // scalar
	}
	var backing any
	switch {
	case s.layout && e.Buffer:
		be, _ := s.bufs.Lookup(e.Name)
		return s.bufs.view(be, false)
	case s.layout && s.dtype == tensor.Float32:
		backing = s.scratch32[:e.Len:e.Len]
	case s.layout:
		backing = s.scratch64[:e.Len:e.Len]
	case s.dtype == tensor.Float32 && grad:
		backing = span(s.g32, e)
	case s.dtype == tensor.Float32:
		backing = span(s.f32, e)
	case grad:
		backing = span(s.g64, e)
	default:
		backing = span(s.f64, e)
	}
	if len(shape) == 0 {
		return tensor.New(tensor.WithShape(), tensor.WithBacking(backing))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(backing))
}

// Clone returns a store with the same layout and a copy of the values; the
// gradient buffer starts at zero.
func (s *Store) Clone() *Store {
	return &Store{
		dtype: s.dtype, entries: s.entries, index: s.index, nParams: s.nParams, n: s.n,
		f32: slices.Clone(s.f32), g32: zerosLike(s.g32),
		f64: slices.Clone(s.f64), g64: zerosLike(s.g64),
	}
}

// CopyFrom copies every value from o, which must have the same layout.
func (s *Store) CopyFrom(o *Store) error {
	if err := s.SameLayout(o); err != nil {
		return err
	}
	copy(s.f32, o.f32)
	copy(s.f64, o.f64)
	return nil
}

// SameLayout reports how o's layout differs from s's, if it does.
func (s *Store) SameLayout(o *Store) error {
	if s.dtype != o.dtype {
		return fmt.Errorf("store dtypes differ: %v and %v", s.dtype, o.dtype)
	}
	if len(s.entries) != len(o.entries) {
		return fmt.Errorf("stores hold %d and %d tensors", len(s.entries), len(o.entries))
	}
	for i, e := range s.entries {
		f := o.entries[i]
		if e.Name != f.Name || e.Offset != f.Offset || e.Len != f.Len || e.Buffer != f.Buffer {
			return fmt.Errorf("tensor %d differs: %q (%v at %d) and %q (%v at %d)", i, e.Name, e.Shape, e.Offset, f.Name, f.Shape, f.Offset)
		}
	}
	return nil
}

// ZeroGrad sets every gradient to 0.
func (s *Store) ZeroGrad() {
	clear(s.g32)
	clear(s.g64)
}

// SHA256 hashes every parameter and buffer in store order (little-endian IEEE
// bits), so two runs can be compared bit for bit.
func (s *Store) SHA256() string {
	h := sha256.New()
	buf := make([]byte, 0, 1<<16)
	buf = hashBits(h, buf, s.f32)
	hashBits(h, buf, s.f64)
	return hex.EncodeToString(h.Sum(nil))
}

// hashBits writes the little-endian bits of vals to h, a chunk at a time
// through buf, and returns buf for reuse.
func hashBits[T float32 | float64](h hash.Hash, buf []byte, vals []T) []byte {
	per := cap(buf) / int(unsafe.Sizeof(T(0)))
	for len(vals) > 0 {
		n := min(per, len(vals))
		buf, _ = binary.Append(buf[:0], binary.LittleEndian, vals[:n]) // cannot fail on []float32 or []float64
		h.Write(buf)
		vals = vals[n:]
	}
	return buf
}

// zerosLike is nil for nil, else a zeroed slice of s's length.
func zerosLike[T float32 | float64](s []T) []T {
	if s == nil {
		return nil
	}
	return make([]T, len(s))
}
