//go:build amd64 && !purego

#include "textflag.h"
#include "elem_amd64.h"

// The fused BatchNorm + residual + ReLU pass of bnadd.go, AVX-512, as the
// kernels of elem_amd64.s: 16 lanes a step and a masked tail (no element
// outside [0, n) is read or written).

// func bnAddRelu32(x1, x2, y *float32, n int, a, b, k float32)
// y[i] = max(a·x1[i] + (b·x2[i] + k), 0), NaN passing through as Go's max.
TEXT ·bnAddRelu32(SB), NOSPLIT, $0-44
	MOVQ x1+0(FP), SI
	MOVQ x2+8(FP), R10
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	VBROADCASTSS a+32(FP), Z4
	VBROADCASTSS b+36(FP), Z5
	VBROADCASTSS k+40(FP), Z6
	VPXORD Z3, Z3, Z3
	MOVQ CX, R9
	SHRQ $4, R9
	XORQ BX, BX
	TESTQ R9, R9
	JZ   batail
baloop:
	VMOVUPS (R10)(BX*1), Z0
	VFMADD213PS Z6, Z5, Z0        // Z0 = x2·b + k
	VFMADD231PS (SI)(BX*1), Z4, Z0 // Z0 += x1·a
	VMAXPS  Z0, Z3, Z0
	VMOVUPS Z0, (DI)(BX*1)
	ADDQ $64, BX
	DECQ R9
	JNZ  baloop
batail:
	TAILMASK(badone)
	VMOVUPS.Z (R10)(BX*1), K1, Z0
	VMOVUPS.Z (SI)(BX*1), K1, Z1
	VFMADD213PS Z6, Z5, Z0
	VFMADD231PS Z1, Z4, Z0
	VMAXPS  Z0, Z3, Z0
	VMOVUPS Z0, K1, (DI)(BX*1)
badone:
	VZEROUPPER
	RET

// The masked output gradient of a ReLU and its sums (maskDotSums32,
// maskAddDotSums32): dm[i] = dy[i] where y[i] is not ≤ 0 (positive or NaN),
// else +0, and Σdm, Σdm·x, in one loop with dotSums32's accumulators and
// order (the same bits as maskPos32AVX then dotSums32), without reading dm
// back. SI: y, R10: x, DI: dm, CX: n; LOADDY(off, k, z) loads dy at BX+off
// into z where the opmask k is set, +0 elsewhere; the labels name the loop,
// the half step, the tail and the end; s and sx are where the sums go.
#define MASKSUMS(LOADDY, loop, half, tail, done, s, sx) \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	MOVQ CX, R9 \
	SHRQ $5, R9 \
	XORQ BX, BX \
	TESTQ R9, R9 \
	JZ   half \
loop: \
	VMOVUPS (SI)(BX*1), Z7 \
	VMOVUPS 64(SI)(BX*1), Z8 \
	VCMPPS  $0x16, Z4, Z7, K2 \
	VCMPPS  $0x16, Z4, Z8, K3 \
	LOADDY(0, K2, Z5) \
	LOADDY(64, K3, Z6) \
	VMOVUPS Z5, (DI)(BX*1) \
	VMOVUPS Z6, 64(DI)(BX*1) \
	VADDPS  Z5, Z0, Z0 \
	VADDPS  Z6, Z1, Z1 \
	VFMADD231PS (R10)(BX*1), Z5, Z2 \
	VFMADD231PS 64(R10)(BX*1), Z6, Z3 \
	ADDQ $128, BX \
	DECQ R9 \
	JNZ  loop \
half: \
	TESTQ $16, CX \
	JZ   tail \
	VMOVUPS (SI)(BX*1), Z7 \
	VCMPPS  $0x16, Z4, Z7, K2 \
	LOADDY(0, K2, Z5) \
	VMOVUPS Z5, (DI)(BX*1) \
	VADDPS  Z5, Z0, Z0 \
	VFMADD231PS (R10)(BX*1), Z5, Z2 \
	ADDQ $64, BX \
tail: \
	TAILMASK(done) \
	VMOVUPS.Z (SI)(BX*1), K1, Z7 \
	VCMPPS  $0x16, Z4, Z7, K1, K2 \
	LOADDY(0, K2, Z5) \
	VMOVUPS Z5, K1, (DI)(BX*1) \
	VMOVUPS.Z (R10)(BX*1), K1, Z6 \
	VADDPS  Z5, Z1, Z1 \
	VFMADD231PS Z6, Z5, Z3 \
done: \
	VADDPS Z1, Z0, Z0 \
	VADDPS Z3, Z2, Z2 \
	HSUM(Z0, Y0, X0, s) \
	HSUM(Z2, Y2, X2, sx)

// dy from R8.
#define LOADDY(off, k, z) VMOVUPS.Z off(R8)(BX*1), k, z

// dy = a + b, a from R8 and b from R12 (Z9 scratch), rounded once as add32.
#define LOADSUM(off, k, z) VMOVUPS.Z off(R8)(BX*1), k, z; VMOVUPS.Z off(R12)(BX*1), k, Z9; VADDPS Z9, z, z

// func maskDotSums32(y, dy, x, dm *float32, n int) (s, sx float32)
TEXT ·maskDotSums32(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), SI
	MOVQ dy+8(FP), R8
	MOVQ x+16(FP), R10
	MOVQ dm+24(FP), DI
	MOVQ n+32(FP), CX
	MASKSUMS(LOADDY, mdloop, mdhalf, mdtail, mddone, s+40(FP), sx+44(FP))
	VZEROUPPER
	RET

// func maskAddDotSums32(y, a, b, x, dm *float32, n int) (s, sx float32)
// maskDotSums32 with dy = a + b: the same bits as add32 into dm, then
// maskDotSums32.
TEXT ·maskAddDotSums32(SB), NOSPLIT, $0-56
	MOVQ y+0(FP), SI
	MOVQ a+8(FP), R8
	MOVQ b+16(FP), R12
	MOVQ x+24(FP), R10
	MOVQ dm+32(FP), DI
	MOVQ n+40(FP), CX
	MASKSUMS(LOADSUM, maloop, mahalf, matail, madone, s+48(FP), sx+52(FP))
	VZEROUPPER
	RET
