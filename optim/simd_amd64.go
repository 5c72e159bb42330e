//go:build amd64 && !purego

package optim

import "golang.org/x/sys/cpu"

// useSIMD selects the AVX2 kernels; a variable so tests can compare both.
var useSIMD = cpu.X86.HasAVX2

// Flags of sgd32AVX2 and sgd64AVX2.
const (
	flagWD       = 1 // add wd*p to the gradient
	flagMomentum = 2 // use the momentum buffer
	flagFirst    = 4 // first step: the buffer is the gradient
	flagNesterov = 8
)

//go:noescape
func adam32AVX2(p, grads, m, v *float32, n int, k *adamK32, wd int)

//go:noescape
func sgd32AVX2(p, grads, buf *float32, n int, k *sgdK32, flags int)

//go:noescape
func adam64AVX2(p, grads, m, v *float64, n int, k *adamK64, wd int)

//go:noescape
func sgd64AVX2(p, grads, buf *float64, n int, k *sgdK64, flags int)

// adamSIMD runs adam on a length that is a multiple of the lane count (8
// float32, 4 float64). The type switch is on pointers, so it boxes nothing.
func adamSIMD[T float](p, g, m, v []T, k *adamK[T]) {
	wd := 0
	if k.wd != 0 {
		wd = 1
	}
	switch k := any(k).(type) {
	case *adamK32:
		adam32AVX2(ptr[float32](p), ptr[float32](g), ptr[float32](m), ptr[float32](v), len(p), k, wd)
	case *adamK64:
		adam64AVX2(ptr[float64](p), ptr[float64](g), ptr[float64](m), ptr[float64](v), len(p), k, wd)
	}
}

// sgdSIMD runs SGD on a length that is a multiple of the lane count; buf is
// nil without momentum.
func sgdSIMD[T float](p, g, buf []T, k *sgdK[T]) {
	flags := 0
	if k.wd != 0 {
		flags |= flagWD
	}
	var b *T
	if buf != nil {
		flags |= flagMomentum
		b = &buf[0]
		if k.first {
			flags |= flagFirst
		}
		if k.nesterov {
			flags |= flagNesterov
		}
	}
	switch k := any(k).(type) {
	case *sgdK32:
		sgd32AVX2(ptr[float32](p), ptr[float32](g), any(b).(*float32), len(p), k, flags)
	case *sgdK64:
		sgd64AVX2(ptr[float64](p), ptr[float64](g), any(b).(*float64), len(p), k, flags)
	}
}

// ptr is &s[0] as an *E, where E is T's type (checked: the assertion panics
// otherwise, which the type switches above rule out).
func ptr[E, T float](s []T) *E { return any(&s[0]).(*E) }
