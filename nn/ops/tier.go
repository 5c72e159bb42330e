package ops

import (
	"fmt"
	"os"
)

// KernelsEnv names the environment variable that caps the instruction set
// of this package's own float32 kernels, as OPENBLAS_CORETYPE or
// MKL_ENABLE_INSTRUCTIONS do for theirs: "auto" or unset (the best the CPU
// has), "avx512", "avx2" (AVX2 and FMA), or "go" (the Go loops and the
// BLAS). A cap above what the CPU has changes nothing. It lets a machine
// with AVX-512 run and time what a machine without it runs.
const KernelsEnv = "FULGUR_NN_KERNELS"

// kernelCap is KernelsEnv's value, read once; CheckKernels says whether it
// is valid (an invalid one caps nothing).
var kernelCap = os.Getenv(KernelsEnv)

// CheckKernels reports a KernelsEnv value that is not one of the choices.
func CheckKernels() error {
	switch kernelCap {
	case "", "auto", "avx512", "avx2", "go":
		return nil
	}
	return fmt.Errorf("%s=%q: use auto, avx512, avx2 or go (or unset it)", KernelsEnv, kernelCap)
}

// capAllows reports whether the cap lets kernels of tier run ("avx512",
// "avx2").
func capAllows(tier string) bool {
	switch kernelCap {
	case "go":
		return false
	case "avx2":
		return tier == "avx2"
	}
	return true
}
