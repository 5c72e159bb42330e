//go:build !amd64 || purego

package ops

func wgInput16(*float32, *int32, int, *float32, int, *float32) { panic("ops: no AVX-512") }
func wgOutput16(*float32, int, *float32, *float32, *int32, int, *int32) {
	panic("ops: no AVX-512")
}
func wgGrad16(*float32, *int32, int, *float32, int, *float32)    { panic("ops: no AVX-512") }
func wgKernel16(*float32, *int32, *float32, int, *float32, bool) { panic("ops: no AVX-512") }
func wgKernelGrad8(*float32, int, *float32, *float64)            { panic("ops: no AVX-512") }
func wgKernelGrad16(*float32, int, *float32, *float64, *float32) { panic("ops: no AVX-512") }
func wgKernel8AVX2(*float32, *float32, int, *float32, *float32)  { panic("ops: no AVX2") }
func wgKernelGrad16AVX2(*float32, int, *float32, *float64, *float32) {
	panic("ops: no AVX2")
}

func wgInputTiles(*float32, *int32, int, *float32, int, *float32) { panic("ops: no AVX2") }
func wgGradTiles(*float32, *int32, int, *float32, int, *float32)  { panic("ops: no AVX2") }
func wgOutputTiles(*float32, int, *float32, *float32, *int32, int, *int32) {
	panic("ops: no AVX2")
}
