//go:build amd64 && !purego

package ops

import "golang.org/x/sys/cpu"

// useSgemmKernels selects the AVX-512 kernels of sgemm_amd64.s for float32
// convolutions; a variable so tests can compare them with the BLAS.
var useSgemmKernels = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL

//go:noescape
func sgemmNN8x32(k int, ap, b *float32, boff *int32, c *float32, ldc int, mask uint32, acc int)

//go:noescape
func sgemmNT4x6(n16 int, tail uint32, a *float32, lda int, b *float32, boff *int32, c *float32, ldc int, acc int)
