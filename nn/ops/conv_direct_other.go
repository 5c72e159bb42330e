//go:build !amd64 || purego

package ops

func tapsFMA32(*float32, int, *float32, *int, *float32, int, int, float32) { panic("ops: no AVX-512") }
func tapsDot4x32(*float32, int, *float32, *int, *float32)                  { panic("ops: no AVX-512") }
