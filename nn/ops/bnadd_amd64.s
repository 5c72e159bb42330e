//go:build amd64 && !purego

#include "textflag.h"

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
	MOVQ  CX, DX
	ANDQ  $15, DX
	JZ    badone
	MOVL  $1, R11
	SHLXL DX, R11, R11
	DECL  R11
	KMOVW R11, K1
	VMOVUPS.Z (R10)(BX*1), K1, Z0
	VMOVUPS.Z (SI)(BX*1), K1, Z1
	VFMADD213PS Z6, Z5, Z0
	VFMADD231PS Z1, Z4, Z0
	VMAXPS  Z0, Z3, Z0
	VMOVUPS Z0, K1, (DI)(BX*1)
badone:
	VZEROUPPER
	RET
