//go:build !amd64 || purego

package ops

func permRows32(*float32, int, *float32, *float32, int, int, *permPlan) { panic("ops: no AVX-512") }
