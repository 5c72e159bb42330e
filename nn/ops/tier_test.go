package ops

import (
	"os"
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

// TestExpectedTier checks which kernels this CPU takes, when
// FULGUR_TEST_EXPECT_TIER says (avx512, avx2 or go): .ci/run runs the
// package on an emulated CPU without AVX-512 and must know the AVX2 tier
// was the one tested there.
func TestExpectedTier(t *testing.T) {
	want := os.Getenv("FULGUR_TEST_EXPECT_TIER")
	if want == "" {
		t.Skip("FULGUR_TEST_EXPECT_TIER not set")
	}
	got := "go"
	switch {
	case useAVX512:
		got = "avx512"
	case useAVX2:
		got = "avx2"
	}
	if got != want {
		t.Fatalf("the kernels in use are the %s tier, want %s (useAVX512 %v, useAVX2 %v)", got, want, useAVX512, useAVX2)
	}
}
