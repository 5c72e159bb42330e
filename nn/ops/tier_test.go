package ops

import (
	"strings"
	"testing"
)

func TestKernelCap(t *testing.T) {
	defer func(old string) { kernelCap = old }(kernelCap)
	for _, c := range []struct {
		cap          string
		avx512, avx2 bool
		bad          bool
	}{
		{"", true, true, false},
		{"auto", true, true, false},
		{"avx512", true, true, false},
		{"avx2", false, true, false},
		{"go", false, false, false},
		{"AVX2", true, true, true},
		{"sse", true, true, true},
	} {
		kernelCap = c.cap
		if got := capAllows("avx512"); got != c.avx512 {
			t.Errorf("%s=%q: AVX-512 kernels allowed %v, want %v", KernelsEnv, c.cap, got, c.avx512)
		}
		if got := capAllows("avx2"); got != c.avx2 {
			t.Errorf("%s=%q: AVX2 kernels allowed %v, want %v", KernelsEnv, c.cap, got, c.avx2)
		}
		err := CheckKernels()
		if (err != nil) != c.bad {
			t.Errorf("%s=%q: CheckKernels() = %v, want an error: %v", KernelsEnv, c.cap, err, c.bad)
		}
		if err != nil && (!strings.Contains(err.Error(), KernelsEnv) || !strings.Contains(err.Error(), c.cap)) {
			t.Errorf("%s=%q: the error %q names neither the variable nor the value", KernelsEnv, c.cap, err)
		}
	}
}
