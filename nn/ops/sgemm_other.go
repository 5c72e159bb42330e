//go:build !amd64 || purego

package ops

// useSgemmKernels is false where sgemm_amd64.s does not build: every
// multiply goes through internal/blas.
var useSgemmKernels = false

func sgemmNN8x32(int, *float32, *float32, *int32, *float32, int, uint32, int) {
	panic("ops: sgemmNN8x32 without AVX-512 kernels")
}

func sgemmNT4x6(int, uint32, *float32, int, *float32, *int32, *float32, int, int) {
	panic("ops: sgemmNT4x6 without AVX-512 kernels")
}
