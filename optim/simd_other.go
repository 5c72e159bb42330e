//go:build !amd64 || purego

package optim

// useSIMD is false: the Go loops run everywhere but on amd64.
var useSIMD = false

func adamSIMD[T float](p, g, m, v []T, k *adamK[T]) { adamGo(p, g, m, v, k) }

func sgdSIMD[T float](p, g, buf []T, k *sgdK[T]) {
	if buf == nil {
		sgdPlainGo(p, g, k)
		return
	}
	sgdMomentumGo(p, g, buf, k)
}
