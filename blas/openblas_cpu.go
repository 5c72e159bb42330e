package blas

import "golang.org/x/sys/cpu"

// hasAVX2FMA reports an x86-64 processor with AVX2 and FMA (false elsewhere).
func hasAVX2FMA() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// hasAVX512SKX reports the AVX-512 subsets of Intel Skylake-X (F, CD, DQ,
// BW, VL) with AVX2 and FMA.
func hasAVX512SKX() bool {
	x := cpu.X86
	return hasAVX2FMA() && x.HasAVX512F && x.HasAVX512CD && x.HasAVX512DQ && x.HasAVX512BW && x.HasAVX512VL
}
