//go:build amd64 && !purego

package ops

//go:noescape
func bnAddRelu32(x1, x2, y *float32, n int, a, b, k float32)

// bnAddRelu32AVX2 is bnAddRelu32 on AVX2 (elem_avx2_amd64.s), the same bits.
//
//go:noescape
func bnAddRelu32AVX2asm(x1, x2, y *float32, n int, a, b, k float32)

//go:noescape
func maskDotSums32(y, dy, x, dm *float32, n int) (s, sx float32)

//go:noescape
func maskAddDotSums32(y, a, b, x, dm *float32, n int) (s, sx float32)
