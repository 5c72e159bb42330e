//go:build !amd64 || purego

package ops

// useAVX512 is false where sgemm_amd64.s does not build: every
// multiply goes through package blas.
var useAVX512 = false

// useAVX2 is false there too.
var useAVX2 = false

func sgemmNN8x32(int, *float32, *float32, *int32, *float32, int, uint32, int) {
	panic("ops: sgemmNN8x32 without AVX-512 kernels")
}

func sgemmNT4x6(int, uint32, *float32, int, *float32, *int32, *float32, int, int, int, int, int) {
	panic("ops: sgemmNT4x6 without AVX-512 kernels")
}

func sgemmNN8x24AVX2(int, *float32, *float32, *int32, *float32, int, int) {
	panic("ops: sgemmNN8x24AVX2 without AVX2 kernels")
}

func sgemmNN8x32AVX2(int, *float32, *float32, *int32, *float32, int, int, int) {
	panic("ops: sgemmNN8x32AVX2 without AVX2 kernels")
}

func sgemmNT4x6AVX2(int, uint32, *float32, int, *float32, *int32, *float32, int, int, int, int, int) {
	panic("ops: sgemmNT4x6AVX2 without AVX2 kernels")
}

func sgemmNT4x4AVX2(int, uint32, *float32, int, *float32, *int32, *float32, int, int, int, int, int) {
	panic("ops: sgemmNT4x4AVX2 without AVX2 kernels")
}

func affine32AVX2(*float32, *float32, int, float32, float32, int) { panic("ops: no AVX2") }
func addRelu32AVX2(*float32, *float32, *float32, int)             { panic("ops: no AVX2") }
func relu32AVX2(*float32, *float32, int)                          { panic("ops: no AVX2") }
func add32AVX2(*float32, *float32, *float32, int)                 { panic("ops: no AVX2") }
func maskPos32AVX2(*float32, *float32, *float32, int)             { panic("ops: no AVX2") }
func lincomb32AVX2(*float32, *float32, *float32, int, float32, float32, float32) {
	panic("ops: no AVX2")
}
func shiftedSums32AVX2(*float32, int, float32) (float32, float32) { panic("ops: no AVX2") }
func dotSums32AVX2(*float32, *float32, int) (float32, float32)    { panic("ops: no AVX2") }
func affine32(*float32, *float32, int, float32, float32, int)     { panic("ops: no AVX-512") }
func addRelu32(*float32, *float32, *float32, int)                 { panic("ops: no AVX-512") }
func maskPos32AVX(*float32, *float32, *float32, int)              { panic("ops: no AVX-512") }
func add32(*float32, *float32, *float32, int)                     { panic("ops: no AVX-512") }
func lincomb32(*float32, *float32, *float32, int, float32, float32, float32) {
	panic("ops: no AVX-512")
}
func shiftedSums32(*float32, int, float32) (float32, float32)  { panic("ops: no AVX-512") }
func dotSums32(*float32, *float32, int) (float32, float32)     { panic("ops: no AVX-512") }
func copyRows32(*float32, int, *float32, int, int, int, int)   { panic("ops: no AVX-512") }
func copyRowsAVX2(*float32, int, *float32, int, int, int, int) { panic("ops: no AVX2") }
func interleave2AVX2(*float32, *float32, *float32, int)        { panic("ops: no AVX2") }
func deinterleave2AVX2(*float32, *float32, *float32, int)      { panic("ops: no AVX2") }
