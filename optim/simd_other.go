//go:build !amd64 || purego

package optim

// useSIMD is false: the Go loops run everywhere but on amd64.
var useSIMD = false

func adam32x8(p, g, m, v []float32, k *adamK32) { adam32Go(p, g, m, v, k) }

func sgd32x8(p, g, buf []float32, k sgdK32) {
	if buf == nil {
		sgdPlain32Go(p, g, k)
		return
	}
	sgdMomentum32Go(p, g, buf, k)
}

func adam64x4(p, g, m, v []float64, k *adamK64) { adam64Go(p, g, m, v, k) }

func sgd64x4(p, g, buf []float64, k sgdK64) {
	if buf == nil {
		sgdPlain64Go(p, g, k)
		return
	}
	sgdMomentum64Go(p, g, buf, k)
}
