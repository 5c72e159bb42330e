//go:build amd64 && !purego

package ops

import "golang.org/x/sys/cpu"

// useAVX512 selects the AVX-512 kernels of sgemm_amd64.s (the float32
// convolution multiplies) and elem_amd64.s (the float32 normalisation and
// activation loops); a variable so tests can compare them with the Go loops
// and the BLAS. KernelsEnv can turn it off.
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL && capAllows("avx512")

// useAVX2 says the CPU has AVX2 and FMA and KernelsEnv allows kernels of
// that tier: the kernels taken where useAVX512 is false.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && capAllows("avx2")

//go:noescape
func sgemmNN8x32(k int, ap, b *float32, boff *int32, c *float32, ldc int, mask uint32, acc int)

//go:noescape
func sgemmNT4x6(n16 int, tail uint32, a *float32, lda int, b *float32, boff *int32, c *float32, ldc int, acc int, segs, astride, bstride int)

// sgemmNN8x32AVX2 is sgemmNN8x32 on AVX2 and FMA, taking the number of
// columns (1 to 32) where sgemmNN8x32 takes their mask.
//
//go:noescape
func sgemmNN8x32AVX2(k int, ap, b *float32, boff *int32, c *float32, ldc int, ncols int, acc int)

// sgemmNN8x24AVX2 is sgemmNN8x32AVX2 for 24 whole columns, in pieces of
// twelve accumulators: the same bits.
//
//go:noescape
func sgemmNN8x24AVX2(k int, ap, b *float32, boff *int32, c *float32, ldc int, acc int)

// sgemmNT4x6AVX2 is sgemmNT4x6 on AVX2 and FMA.
//
//go:noescape
func sgemmNT4x6AVX2(n16 int, tail uint32, a *float32, lda int, b *float32, boff *int32, c *float32, ldc int, acc int, segs, astride, bstride int)

// sgemmNT4x4AVX2 is sgemmNT4x6AVX2 for four B rows (a 4x4 block of c):
// the same bits.
//
//go:noescape
func sgemmNT4x4AVX2(n16 int, tail uint32, a *float32, lda int, b *float32, boff *int32, c *float32, ldc int, acc int, segs, astride, bstride int)

// The elementwise kernels of elem_avx2_amd64.s: those of elem_amd64.s on
// AVX2, the same bits.

//go:noescape
func affine32AVX2asm(x, y *float32, n int, s, b float32, relu int)

//go:noescape
func addRelu32AVX2asm(a, b, y *float32, n int)

//go:noescape
func relu32AVX2asm(x, y *float32, n int)

//go:noescape
func add32AVX2asm(a, b, y *float32, n int)

//go:noescape
func maskPos32AVX2asm(y, dy, dx *float32, n int)

//go:noescape
func lincomb32AVX2asm(d, x, out *float32, n int, a, b, k float32)

//go:noescape
func shiftedSums32AVX2asm(x *float32, n int, k float32) (s, sq float32)

//go:noescape
func dotSums32AVX2asm(d, x *float32, n int) (s, sx float32)

//go:noescape
func affine32(x, y *float32, n int, s, b float32, relu int)

//go:noescape
func addRelu32(a, b, y *float32, n int)

//go:noescape
func add32(a, b, y *float32, n int)

//go:noescape
func maskPos32AVX(y, dy, dx *float32, n int)

//go:noescape
func lincomb32(d, x, out *float32, n int, a, b, k float32)

//go:noescape
func shiftedSums32(x *float32, n int, k float32) (s, sq float32)

//go:noescape
func dotSums32(d, x *float32, n int) (s, sx float32)

//go:noescape
func copyRows32(dst *float32, ldd int, src *float32, lds int, w, gap, rows int)

// interleave2AVX2 and deinterleave2AVX2 are interleave2's and
// deinterleave2's loops for n ≥ 4 pairs (elem_avx2_amd64.s).
//
//go:noescape
func interleave2AVX2(row, e, o *float32, n int)

//go:noescape
func deinterleave2AVX2(e, o, src *float32, n int)

//go:noescape
func copyRowsAVX2(dst *float32, ldd int, src *float32, lds int, w, gap, rows int)
