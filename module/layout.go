package module

import (
	"fmt"

	"gorgonia.org/tensor"
)

// NewLayoutStore returns a store laid out exactly as NewStore(specs, dtype,
// seed) lays it out (the same entries and offsets), whose buffers are
// allocated and initialised as NewStore does, but whose learnable parameters
// have no memory of their own: every parameter's view (Tensor, and the node
// Step.Param binds) shows one shared scratch region the size of the largest
// parameter, and there is no gradient buffer (Data32, Data64, Grad32, Grad64
// and Grad are nil; GradTensor fails). A strategy that keeps the parameters
// sharded across ranks (fsdp) builds graphs over it and gives the engine the
// parameters' values while it runs; InitParams gives each rank its span of
// the initial values.
//
// scratch, when not nil, is the memory the parameters' views show
// ([]float32 or []float64 of the store's dtype, at least the largest
// parameter's size): a strategy can pass a buffer it uses for something else
// at run time, since the views are only read while graphs are built. nil
// allocates one.
func NewLayoutStore(specs []Spec, dtype tensor.Dtype, seed uint64, scratch any) (*Store, error) {
	var bufs []Spec
	for _, sp := range specs {
		if sp.Buffer {
			bufs = append(bufs, sp)
		}
	}
	l, err := newLayout(specs, dtype)
	if err != nil {
		return nil, err
	}
	l.layout, l.seed = true, seed
	maxParam := 0
	for _, e := range l.entries {
		if !e.Buffer {
			maxParam = max(maxParam, e.Len)
		}
	}
	// Buffers keep real memory, initialised as NewStore would.
	full, err := NewStore(bufs, dtype, seed)
	if err != nil {
		return nil, err
	}
	l.bufs = full
	switch sc := scratch.(type) {
	case nil:
		if dtype == tensor.Float32 {
			l.scratch32 = make([]float32, maxParam)
		} else {
			l.scratch64 = make([]float64, maxParam)
		}
	case []float32:
		l.scratch32 = sc
	case []float64:
		l.scratch64 = sc
	default:
		return nil, fmt.Errorf("NewLayoutStore: scratch is a %T: pass nil, []float32 or []float64", scratch)
	}
	if n := len(l.scratch32) + len(l.scratch64); n < maxParam || (dtype == tensor.Float32) != (l.scratch32 != nil) {
		return nil, fmt.Errorf("NewLayoutStore: scratch holds %d values of %T for a %v store whose largest parameter has %d: pass at least that many of the store's dtype", n, scratch, dtype, maxParam)
	}
	return l, nil
}

// newLayout lays out specs like NewStore without allocating values.
func newLayout(specs []Spec, dtype tensor.Dtype) (*Store, error) {
	if dtype != tensor.Float32 && dtype != tensor.Float64 {
		return nil, fmt.Errorf("store dtype is %v: use tensor.Float32 or tensor.Float64", dtype)
	}
	s := &Store{dtype: dtype, index: make(map[string]int, len(specs))}
	off := 0
	for pass := 0; pass < 2; pass++ {
		for _, sp := range specs {
			if sp.Buffer != (pass == 1) {
				continue
			}
			if _, dup := s.index[sp.Name]; dup {
				return nil, fmt.Errorf("tensor %q is declared twice", sp.Name)
			}
			s.index[sp.Name] = len(s.entries)
			s.entries = append(s.entries, Entry{Spec: sp, Offset: off, Len: sp.Size()})
			off += sp.Size()
		}
		if pass == 0 {
			s.nParams = off
		}
	}
	s.n = off
	return s, nil
}

// Layout reports whether s is a layout store (NewLayoutStore): its
// parameters live elsewhere.
func (s *Store) Layout() bool { return s.layout }

// InitParams writes into dst ([]float32 or []float64 of the store's dtype,
// of length hi-lo) the values NewStore with the store's seed gives the flat
// learnable parameters [lo, hi), bit for bit. Each tensor overlapping the
// span is initialised whole in a scratch buffer (its initialiser draws the
// tensor as one sequence), so memory beyond dst is one tensor's worth.
func (s *Store) InitParams(lo, hi int, dst any) error {
	if lo < 0 || hi < lo || hi > s.nParams {
		return fmt.Errorf("InitParams: span [%d, %d) is outside the %d learnable elements", lo, hi, s.nParams)
	}
	n := 0
	switch d := dst.(type) {
	case []float32:
		n = len(d)
	case []float64:
		n = len(d)
	default:
		return fmt.Errorf("InitParams: dst is a %T: pass []float32 or []float64", dst)
	}
	if n != hi-lo {
		return fmt.Errorf("InitParams: dst holds %d values for the span [%d, %d) of %d", n, lo, hi, hi-lo)
	}
	var scratch []float64
	for _, e := range s.entries {
		if e.Buffer || e.Offset+e.Len <= lo || e.Offset >= hi {
			continue
		}
		if cap(scratch) < e.Len {
			scratch = make([]float64, e.Len)
		}
		v := scratch[:e.Len]
		clear(v)
		if e.Init != nil {
			e.Init(rngFor(s.seed, e.Name), e.Shape, v)
		}
		a, b := max(lo, e.Offset), min(hi, e.Offset+e.Len)
		src := v[a-e.Offset : b-e.Offset]
		switch d := dst.(type) {
		case []float32:
			narrow(d[a-lo:b-lo], src)
		case []float64:
			copy(d[a-lo:b-lo], src)
		}
	}
	return nil
}
