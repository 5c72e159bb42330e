package collective

import (
	"fmt"
	"unsafe"
)

// Float is the element type constraint of collective buffers.
type Float interface{ ~float32 | ~float64 }

// ReduceInto sets dst[i] = dst[i] op src[i] for Sum, Mean (summed; call
// Scale afterwards), Max and Min. len(src) must be >= len(dst).
func ReduceInto[T Float](dst, src []T, op Op) { ReduceTo(dst, dst, src, op) }

// ReduceTo sets dst[i] = a[i] op b[i] for Sum, Mean (summed), Max and Min;
// Max and Min keep a unless b is larger or smaller, which decides between
// -0 and +0 and NaNs, so the order of the operands matters to the bits.
// dst may be a or b; len(a) and len(b) must be >= len(dst). Backends that
// reduce in rank order call it with a the lower rank's values.
func ReduceTo[T Float](dst, a, b []T, op Op) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case Sum, Mean:
		i := addVec(dst, a, b)
		for ; i+8 <= len(dst); i += 8 {
			d := dst[i : i+8 : i+8]
			x := a[i : i+8 : i+8]
			y := b[i : i+8 : i+8]
			d[0] = x[0] + y[0]
			d[1] = x[1] + y[1]
			d[2] = x[2] + y[2]
			d[3] = x[3] + y[3]
			d[4] = x[4] + y[4]
			d[5] = x[5] + y[5]
			d[6] = x[6] + y[6]
			d[7] = x[7] + y[7]
		}
		for ; i < len(dst); i++ {
			dst[i] = a[i] + b[i]
		}
	case Max:
		for i, v := range b {
			if v > a[i] {
				dst[i] = v
			} else {
				dst[i] = a[i]
			}
		}
	case Min:
		for i, v := range b {
			if v < a[i] {
				dst[i] = v
			} else {
				dst[i] = a[i]
			}
		}
	}
}

// Scale divides every element by n; backends call it once after a Mean.
func Scale[T Float](buf []T, n int) {
	d := T(n)
	for i := divVec(buf, d); i < len(buf); i++ {
		buf[i] /= d
	}
}

// ReduceAny is ReduceInto on untyped buffers of the same dtype.
func ReduceAny(dst, src any, op Op) error {
	switch d := dst.(type) {
	case []float32:
		s, ok := src.([]float32)
		if !ok {
			return fmt.Errorf("%w: reduce %T into []float32", ErrBadBuffer, src)
		}
		ReduceInto(d, s, op)
	case []float64:
		s, ok := src.([]float64)
		if !ok {
			return fmt.Errorf("%w: reduce %T into []float64", ErrBadBuffer, src)
		}
		ReduceInto(d, s, op)
	default:
		return fmt.Errorf("%w: reduce into %T", ErrBadBuffer, dst)
	}
	return nil
}

// ReduceToAny is ReduceTo on untyped buffers of one dtype.
func ReduceToAny(dst, a, b any, op Op) error {
	switch d := dst.(type) {
	case []float32:
		return reduceToTyped(d, a, b, op)
	case []float64:
		return reduceToTyped(d, a, b, op)
	}
	return fmt.Errorf("%w: reduce into %T", ErrBadBuffer, dst)
}

func reduceToTyped[T Float](dst []T, a, b any, op Op) error {
	x, ok1 := a.([]T)
	y, ok2 := b.([]T)
	if !ok1 || !ok2 {
		return fmt.Errorf("%w: reduce %T and %T into %T", ErrBadBuffer, a, b, dst)
	}
	ReduceTo(dst, x, y, op)
	return nil
}

// ScaleAny is Scale on an untyped buffer.
func ScaleAny(buf any, n int) {
	switch b := buf.(type) {
	case []float32:
		Scale(b, n)
	case []float64:
		Scale(b, n)
	}
}

// Bytes views a []float32 or []float64 as its bytes (no copy).
func Bytes(buf any) []byte {
	switch b := buf.(type) {
	case []float32:
		if len(b) == 0 {
			return nil
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b)*4)
	case []float64:
		if len(b) == 0 {
			return nil
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b)*8)
	}
	return nil
}

// Sub returns buf[lo:hi] keeping its type.
func Sub(buf any, lo, hi int) any {
	switch b := buf.(type) {
	case []float32:
		return b[lo:hi]
	case []float64:
		return b[lo:hi]
	}
	return nil
}

// Alloc returns a zeroed buffer of n elements of dt.
func Alloc(dt DType, n int) any {
	if dt == Float64 {
		return make([]float64, n)
	}
	return make([]float32, n)
}

// Copy copies src into dst (same dtype) and returns the number of elements copied.
func Copy(dst, src any) int {
	switch d := dst.(type) {
	case []float32:
		return copy(d, src.([]float32))
	case []float64:
		return copy(d, src.([]float64))
	}
	return 0
}
