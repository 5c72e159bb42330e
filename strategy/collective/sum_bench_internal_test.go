package collective

import (
	"fmt"
	"testing"
)

// BenchmarkReduceTo: a Sum of two float32 buffers into a third, at the
// all-reduce benchmark's sizes (256 KB in L2, 4 MB in L3, 25 MB in
// memory), with the vector loop where the CPU has one and the Go loop.
// Bytes are the three buffers' traffic, read a and b, write dst.
func BenchmarkReduceTo(b *testing.B) {
	for _, size := range []int{256 << 10, 4 << 20, 25 << 20} {
		for _, vec := range []bool{true, false} {
			if vec && !useAVX2 {
				continue
			}
			name := "go"
			if vec {
				name = "avx2"
			}
			b.Run(fmt.Sprintf("%dKB/%s", size>>10, name), func(b *testing.B) {
				saved := useAVX2
				useAVX2 = vec
				defer func() { useAVX2 = saved }()
				n := size / 4
				x, y, d := make([]float32, n), make([]float32, n), make([]float32, n)
				for i := range x {
					x[i], y[i] = float32(i), float32(n-i)
				}
				b.SetBytes(int64(3 * size))
				for b.Loop() {
					ReduceTo(d, x, y, Sum)
				}
			})
		}
	}
}
