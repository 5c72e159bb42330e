//go:build amd64 && !purego

package collective

import "golang.org/x/sys/cpu"

// useAVX2 selects the AVX2 sum; a variable so tests can compare both.
var useAVX2 = cpu.X86.HasAVX2

//go:noescape
func add32AVX2(dst, a, b *float32, n int)

//go:noescape
func add64AVX2(dst, a, b *float64, n int)

//go:noescape
func div32AVX2(buf *float32, d float32, n int)

//go:noescape
func div64AVX2(buf *float64, d float64, n int)

// addVec sets dst[i] = a[i] + b[i] for a prefix of dst with vector
// instructions and returns its length (0 when it cannot: no AVX2, a type
// other than []float32 or []float64, or fewer than one loop's elements).
// a and b are at least as long as dst.
func addVec[T Float](dst, a, b []T) int {
	if !useAVX2 {
		return 0
	}
	switch d := any(dst).(type) {
	case []float32:
		n := len(d) &^ 31
		if n > 0 {
			add32AVX2(&d[0], &any(a).([]float32)[0], &any(b).([]float32)[0], n)
		}
		return n
	case []float64:
		n := len(d) &^ 15
		if n > 0 {
			add64AVX2(&d[0], &any(a).([]float64)[0], &any(b).([]float64)[0], n)
		}
		return n
	}
	return 0
}

// divVec divides a prefix of buf by d with vector instructions and returns
// its length (0 when it cannot, as addVec). A Mean divides once a step,
// after the sum; the Go loop's scalar divisions took 23-42 µs for
// resnet8's 77,754 float32 gradients and 75-168 µs for the mlp's 235,146
// (a tenth of an mlp ddp step), the vector loop 8.6 and 25-31 µs, with
// the same IEEE division per element (BenchmarkScale).
func divVec[T Float](buf []T, d T) int {
	if !useAVX2 {
		return 0
	}
	switch b := any(buf).(type) {
	case []float32:
		n := len(b) &^ 31
		if n > 0 {
			div32AVX2(&b[0], float32(d), n)
		}
		return n
	case []float64:
		n := len(b) &^ 15
		if n > 0 {
			div64AVX2(&b[0], float64(d), n)
		}
		return n
	}
	return 0
}
