//go:build amd64 && !purego

package optim

import "golang.org/x/sys/cpu"

// useSIMD selects the AVX2 kernels; a variable so tests can compare both.
var useSIMD = cpu.X86.HasAVX2

// Flags of sgd32AVX2.
const (
	sgdWD       = 1 // add wd*p to the gradient
	sgdMomentum = 2 // use the momentum buffer
	sgdFirst    = 4 // first step: the buffer is the gradient
	sgdNesterov = 8
)

//go:noescape
func adam32AVX2(p, grads, m, v *float32, n int, k *adamK32, wd int)

//go:noescape
func sgd32AVX2(p, grads, buf *float32, n int, k *sgdK32, flags int)

// adam32x8 runs adam32 on a length that is a multiple of 8.
func adam32x8(p, g, m, v []float32, k *adamK32) {
	wd := 0
	if k.wd != 0 {
		wd = 1
	}
	adam32AVX2(&p[0], &g[0], &m[0], &v[0], len(p), k, wd)
}

// sgd32x8 runs SGD on a length that is a multiple of 8; buf is nil without
// momentum.
func sgd32x8(p, g, buf []float32, k sgdK32) {
	flags := 0
	if k.wd != 0 {
		flags |= sgdWD
	}
	var b *float32
	if buf != nil {
		flags |= sgdMomentum
		b = &buf[0]
		if k.first {
			flags |= sgdFirst
		}
		if k.nesterov {
			flags |= sgdNesterov
		}
	}
	sgd32AVX2(&p[0], &g[0], b, len(p), &k, flags)
}

//go:noescape
func adam64AVX2(p, grads, m, v *float64, n int, k *adamK64, wd int)

//go:noescape
func sgd64AVX2(p, grads, buf *float64, n int, k *sgdK64, flags int)

// adam64x4 runs adam64 on a length that is a multiple of 4.
func adam64x4(p, g, m, v []float64, k *adamK64) {
	wd := 0
	if k.wd != 0 {
		wd = 1
	}
	adam64AVX2(&p[0], &g[0], &m[0], &v[0], len(p), k, wd)
}

// sgd64x4 runs SGD on a length that is a multiple of 4; buf is nil without
// momentum.
func sgd64x4(p, g, buf []float64, k sgdK64) {
	flags := 0
	if k.wd != 0 {
		flags |= sgdWD
	}
	var b *float64
	if buf != nil {
		flags |= sgdMomentum
		b = &buf[0]
		if k.first {
			flags |= sgdFirst
		}
		if k.nesterov {
			flags |= sgdNesterov
		}
	}
	sgd64AVX2(&p[0], &g[0], b, len(p), &k, flags)
}
