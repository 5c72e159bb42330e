//go:build amd64 && !purego

#include "textflag.h"
#include "elem_amd64.h"

// AVX-512 kernels of the direct convolution (conv_direct.go). Offsets are
// in elements; no element outside [0, n) of y and d, or outside the runs
// x[offs[t] : offs[t]+n], is read or written (masked tails).

// Sets kreg to the low n%16 lanes of n (in reg, clobbered), R13 scratch;
// jumps to done when n%16 is 0.
#define TAPMASK(reg, kreg, done) \
	ANDQ  $15, reg \
	JZ    done \
	MOVL  $1, R13 \
	SHLXL reg, R13, R13 \
	DECL  R13 \
	KMOVW R13, kreg

// func tapsFMA32(y *float32, n int, x *float32, offs *int, w *float32, taps int, add int, bias float32)
// y[i] = bias + (y[i] when add != 0) + Σ_t w[t]·x[i+offs[t]] for i < n,
// taps ≥ 1: four blocks of 16 a step (four accumulators), then one, then
// a masked tail.
TEXT ·tapsFMA32(SB), NOSPLIT, $0-60
	MOVQ y+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ x+16(FP), SI
	MOVQ offs+24(FP), R8
	MOVQ w+32(FP), R9
	MOVQ taps+40(FP), R10
	MOVQ add+48(FP), R12
	VBROADCASTSS bias+56(FP), Z4
	XORQ BX, BX
	MOVQ CX, R14
	SHRQ $4, R14
tfbig:
	CMPQ R14, $4
	JLT  tfone
	VMOVAPS Z4, Z0
	VMOVAPS Z4, Z5
	VMOVAPS Z4, Z6
	VMOVAPS Z4, Z7
	TESTQ R12, R12
	JZ   tfbignoadd
	VADDPS (DI)(BX*1), Z0, Z0
	VADDPS 64(DI)(BX*1), Z5, Z5
	VADDPS 128(DI)(BX*1), Z6, Z6
	VADDPS 192(DI)(BX*1), Z7, Z7
tfbignoadd:
	LEAQ (SI)(BX*1), AX
	XORQ DX, DX
tfbigtap:
	MOVQ (R8)(DX*8), R11
	LEAQ (AX)(R11*4), R11
	VBROADCASTSS (R9)(DX*4), Z1
	VFMADD231PS (R11), Z1, Z0
	VFMADD231PS 64(R11), Z1, Z5
	VFMADD231PS 128(R11), Z1, Z6
	VFMADD231PS 192(R11), Z1, Z7
	INCQ DX
	CMPQ DX, R10
	JLT  tfbigtap
	VMOVUPS Z0, (DI)(BX*1)
	VMOVUPS Z5, 64(DI)(BX*1)
	VMOVUPS Z6, 128(DI)(BX*1)
	VMOVUPS Z7, 192(DI)(BX*1)
	ADDQ $256, BX
	SUBQ $4, R14
	JMP  tfbig
tfone:
	TESTQ R14, R14
	JZ   tftail
	VMOVAPS Z4, Z0
	TESTQ R12, R12
	JZ   tfonenoadd
	VADDPS (DI)(BX*1), Z0, Z0
tfonenoadd:
	LEAQ (SI)(BX*1), AX
	XORQ DX, DX
tfonetap:
	MOVQ (R8)(DX*8), R11
	VBROADCASTSS (R9)(DX*4), Z1
	VFMADD231PS (AX)(R11*4), Z1, Z0
	INCQ DX
	CMPQ DX, R10
	JLT  tfonetap
	VMOVUPS Z0, (DI)(BX*1)
	ADDQ $64, BX
	DECQ R14
	JMP  tfone
tftail:
	TAPMASK(CX, K1, tfdone)
	VMOVAPS Z4, Z0
	TESTQ R12, R12
	JZ   tftailnoadd
	VMOVUPS.Z (DI)(BX*1), K1, Z2
	VADDPS Z2, Z0, Z0
tftailnoadd:
	LEAQ (SI)(BX*1), AX
	XORQ DX, DX
tftailtap:
	MOVQ (R8)(DX*8), R11
	VBROADCASTSS (R9)(DX*4), Z1
	VMOVUPS.Z (AX)(R11*4), K1, Z2
	VFMADD231PS Z2, Z1, Z0
	INCQ DX
	CMPQ DX, R10
	JLT  tftailtap
	VMOVUPS Z0, K1, (DI)(BX*1)
tfdone:
	VZEROUPPER
	RET

// func tapsDot4x32(d *float32, n int, x *float32, offs *int, out *float32)
// out[t] = Σ_i d[i]·x[i+offs[t]] for t < 4, i < n, each in 16 lanes.
TEXT ·tapsDot4x32(SB), NOSPLIT, $0-40
	MOVQ d+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ x+16(FP), R10
	MOVQ offs+24(FP), R8
	MOVQ out+32(FP), DI
	MOVQ 0(R8), R11
	LEAQ (R10)(R11*4), R11
	MOVQ 8(R8), R12
	LEAQ (R10)(R12*4), R12
	MOVQ 16(R8), R9
	LEAQ (R10)(R9*4), R9
	MOVQ 24(R8), AX
	LEAQ (R10)(AX*4), AX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	MOVQ CX, R14
	SHRQ $4, R14
	XORQ BX, BX
	TESTQ R14, R14
	JZ   tdtail
tdloop:
	VMOVUPS (SI)(BX*1), Z4
	VFMADD231PS (R11)(BX*1), Z4, Z0
	VFMADD231PS (R12)(BX*1), Z4, Z1
	VFMADD231PS (R9)(BX*1), Z4, Z2
	VFMADD231PS (AX)(BX*1), Z4, Z3
	ADDQ $64, BX
	DECQ R14
	JNZ  tdloop
tdtail:
	TAPMASK(CX, K1, tddone)
	VMOVUPS.Z (SI)(BX*1), K1, Z4
	VMOVUPS.Z (R11)(BX*1), K1, Z5
	VFMADD231PS Z5, Z4, Z0
	VMOVUPS.Z (R12)(BX*1), K1, Z5
	VFMADD231PS Z5, Z4, Z1
	VMOVUPS.Z (R9)(BX*1), K1, Z5
	VFMADD231PS Z5, Z4, Z2
	VMOVUPS.Z (AX)(BX*1), K1, Z5
	VFMADD231PS Z5, Z4, Z3
tddone:
	HSUM(Z0, Y0, X0, 0(DI))
	HSUM(Z1, Y1, X1, 4(DI))
	HSUM(Z2, Y2, X2, 8(DI))
	HSUM(Z3, Y3, X3, 12(DI))
	VZEROUPPER
	RET
