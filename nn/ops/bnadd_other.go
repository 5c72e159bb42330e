//go:build !amd64 || purego

package ops

func bnAddRelu32(*float32, *float32, *float32, int, float32, float32, float32) {
	panic("ops: no AVX-512")
}

func bnAddRelu32AVX2(*float32, *float32, *float32, int, float32, float32, float32) {
	panic("ops: no AVX2")
}

func maskDotSums32(*float32, *float32, *float32, *float32, int) (float32, float32) {
	panic("ops: no AVX-512")
}

func maskAddDotSums32(*float32, *float32, *float32, *float32, *float32, int) (float32, float32) {
	panic("ops: no AVX-512")
}
