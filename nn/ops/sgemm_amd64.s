//go:build amd64 && !purego

#include "textflag.h"
#include "sgemm_amd64.h"

// float32 matrix-multiply kernels for the convolutions (sgemm.go), AVX-512.
// Go's operand order: VFMADD231PS b, a, acc computes acc += a·b.

// One row of the 8x32 tile: acc(lo), acc(hi) += broadcast(ap[r]) · (Z16,
// Z17). The broadcast is the FMA's own memory operand (EVEX embedded
// broadcast), not a VBROADCASTSS into a register: 3-4% faster on this
// package's Zen 4 host (113-116 against 109-112 GFLOP/s on resnet8's implicit
// forward multiplies, best of ten runs alternating in one process, load
// 9 on 2 cores), the same bits.
#define NNROW(off, lo, hi) \
	VFMADD231PS.BCST off(AX), Z16, lo \
	VFMADD231PS.BCST off(AX), Z17, hi

// Stores a row of the tile into c (masked by K1, K2), adding c first when
// R10 is non-zero, then moves DI to the next row.
#define NNSTORE(lo, hi) \
	TESTQ     R10, R10 \
	JZ        3(PC) \
	VADDPS.Z  (DI), lo, K1, lo \
	VADDPS.Z  64(DI), hi, K2, hi \
	VMOVUPS   lo, K1, (DI) \
	VMOVUPS   hi, K2, 64(DI) \
	ADDQ      DX, DI

// func sgemmNN8x32(k int, ap *float32, b *float32, boff *int32, c *float32, ldc int, mask uint32, acc int)
//
// c[r][0:32] (=, or += when acc != 0) Σ_kk ap[kk·8 + r] · b[boff[kk] + 0:32]
// for rows r < 8 (ldc elements apart); columns whose bit in mask (low 16 bits:
// columns 0-15, high 16: 16-31) is clear are neither read nor written.
TEXT ·sgemmNN8x32(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), CX
	MOVQ ap+8(FP), AX
	MOVQ b+16(FP), SI
	MOVQ boff+24(FP), R8
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), DX
	SHLQ $2, DX
	MOVL mask+48(FP), BX
	KMOVW BX, K1
	SHRL $16, BX
	KMOVW BX, K2
	MOVQ acc+56(FP), R10
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15

nnloop:
	MOVLQSX   (R8), R9
	VMOVUPS.Z (SI)(R9*4), K1, Z16
	VMOVUPS.Z 64(SI)(R9*4), K2, Z17
	NNROW(0, Z0, Z1)
	NNROW(4, Z2, Z3)
	NNROW(8, Z4, Z5)
	NNROW(12, Z6, Z7)
	NNROW(16, Z8, Z9)
	NNROW(20, Z10, Z11)
	NNROW(24, Z12, Z13)
	NNROW(28, Z14, Z15)
	ADDQ      $32, AX
	ADDQ      $4, R8
	DECQ      CX
	JNZ       nnloop

	NNSTORE(Z0, Z1)
	NNSTORE(Z2, Z3)
	NNSTORE(Z4, Z5)
	NNSTORE(Z6, Z7)
	NNSTORE(Z8, Z9)
	NNSTORE(Z10, Z11)
	NNSTORE(Z12, Z13)
	NNSTORE(Z14, Z15)
	VZEROUPPER
	RET

// Four FMAs of one B row against the four A rows (Z24-Z27).
#define NTCOL(bptr, bz, a0, a1, a2, a3) \
	VMOVUPS.Z   (bptr)(BX*1), K1, bz \
	VFMADD231PS bz, Z24, a0 \
	VFMADD231PS bz, Z25, a1 \
	VFMADD231PS bz, Z26, a2 \
	VFMADD231PS bz, Z27, a3

// Sums the lanes of each of six accumulators a0-a5 (one A row against the
// six B rows) into c[j] for j < 6 at DI, or adds them to it when R13 is
// non-zero: the six horizontal sums in one transposing tree of 256-, 128-,
// 64- and 32-bit halves (Z24-Z30 scratch, Z31 the final lane order, K2 the
// six lanes). Each sum is ((l0+l8)+(l4+l12)) + ... , the order a
// per-accumulator tree of halves takes: the same bits, a third of the
// instructions.
#define NTROW(a0, a1, a2, a3, a4, a5) \
	VSHUFF32X4 $0x44, a1, a0, Z24 \
	VSHUFF32X4 $0xEE, a1, a0, Z25 \
	VADDPS     Z25, Z24, Z24 \
	VSHUFF32X4 $0x44, a3, a2, Z25 \
	VSHUFF32X4 $0xEE, a3, a2, Z26 \
	VADDPS     Z26, Z25, Z25 \
	VSHUFF32X4 $0x44, a5, a4, Z26 \
	VSHUFF32X4 $0xEE, a5, a4, Z27 \
	VADDPS     Z27, Z26, Z26 \
	VSHUFF32X4 $0x88, Z25, Z24, Z27 \
	VSHUFF32X4 $0xDD, Z25, Z24, Z28 \
	VADDPS     Z28, Z27, Z27 \
	VSHUFF32X4 $0x88, Z26, Z26, Z28 \
	VSHUFF32X4 $0xDD, Z26, Z26, Z29 \
	VADDPS     Z29, Z28, Z28 \
	VSHUFPS    $0x44, Z28, Z27, Z29 \
	VSHUFPS    $0xEE, Z28, Z27, Z30 \
	VADDPS     Z30, Z29, Z29 \
	VPERMILPS  $0xB1, Z29, Z30 \
	VADDPS     Z30, Z29, Z29 \
	VPERMPS    Z29, Z31, Z30 \
	TESTQ      R13, R13 \
	JZ         2(PC) \
	VADDPS.Z   (DI), Z30, K2, Z30 \
	VMOVUPS    Z30, K2, (DI) \
	ADDQ       DX, DI

// ntlanes is where NTROW's tree leaves the sum of a0, ..., a5: lanes 0, 4,
// 8, 12, 2, 6.
DATA ntlanes<>+0(SB)/4, $0
DATA ntlanes<>+4(SB)/4, $4
DATA ntlanes<>+8(SB)/4, $8
DATA ntlanes<>+12(SB)/4, $12
DATA ntlanes<>+16(SB)/4, $2
DATA ntlanes<>+20(SB)/4, $6
DATA ntlanes<>+24(SB)/4, $0
DATA ntlanes<>+28(SB)/4, $0
DATA ntlanes<>+32(SB)/4, $0
DATA ntlanes<>+36(SB)/4, $0
DATA ntlanes<>+40(SB)/4, $0
DATA ntlanes<>+44(SB)/4, $0
DATA ntlanes<>+48(SB)/4, $0
DATA ntlanes<>+52(SB)/4, $0
DATA ntlanes<>+56(SB)/4, $0
DATA ntlanes<>+60(SB)/4, $0
GLOBL ntlanes<>(SB), RODATA|NOPTR, $64

// func sgemmNT4x6(n16 int, tail uint32, a *float32, lda int, b *float32, boff *int32, c *float32, ldc int, acc int, segs, astride, bstride int)
//
// c[i][j] (=, or += when acc != 0) Σ_{s<segs} Σ_{p<q} a[s·astride + i·lda + p] ·
// b[s·bstride + boff[j] + p] for i < 4, j < 6 (rows of c ldc elements
// apart), where q = 16·n16 + the number of bits in tail (a mask of the low
// q%16 lanes, 0 when none) and segs ≥ 1: the segments (a weight
// gradient's image chunks) are summed lane by lane in the accumulators,
// and summed across lanes once.
TEXT ·sgemmNT4x6(SB), NOSPLIT, $0-96
	MOVQ a+16(FP), R8
	MOVQ lda+24(FP), DX
	SHLQ $2, DX
	LEAQ (R8)(DX*1), R9
	LEAQ (R9)(DX*1), R10
	LEAQ (R10)(DX*1), R11
	NTBROWS
	// B row pointers: AX, CX, DX, R12, R13, SI. Byte index: BX.
	// Iterations: DI (full vectors), then a masked tail of q%16.
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

ntseg:
	XORQ BX, BX
	MOVL $0xffff, DI
	KMOVW DI, K1
	MOVQ n16+0(FP), DI
	TESTQ DI, DI
	JZ   nttail

ntloop:
	VMOVUPS (R8)(BX*1), Z24
	VMOVUPS (R9)(BX*1), Z25
	VMOVUPS (R10)(BX*1), Z26
	VMOVUPS (R11)(BX*1), Z27
	NTCOL(AX, Z28, Z0, Z1, Z2, Z3)
	NTCOL(CX, Z29, Z4, Z5, Z6, Z7)
	NTCOL(DX, Z28, Z8, Z9, Z10, Z11)
	NTCOL(R12, Z29, Z12, Z13, Z14, Z15)
	NTCOL(R13, Z28, Z16, Z17, Z18, Z19)
	NTCOL(SI, Z29, Z20, Z21, Z22, Z23)
	ADDQ $64, BX
	DECQ DI
	JNZ  ntloop

nttail:
	MOVL tail+8(FP), DI
	TESTL DI, DI
	JZ   ntnext
	KMOVW DI, K1
	VMOVUPS.Z (R8)(BX*1), K1, Z24
	VMOVUPS.Z (R9)(BX*1), K1, Z25
	VMOVUPS.Z (R10)(BX*1), K1, Z26
	VMOVUPS.Z (R11)(BX*1), K1, Z27
	NTCOL(AX, Z28, Z0, Z1, Z2, Z3)
	NTCOL(CX, Z29, Z4, Z5, Z6, Z7)
	NTCOL(DX, Z28, Z8, Z9, Z10, Z11)
	NTCOL(R12, Z29, Z12, Z13, Z14, Z15)
	NTCOL(R13, Z28, Z16, Z17, Z18, Z19)
	NTCOL(SI, Z29, Z20, Z21, Z22, Z23)

ntnext:
	// The next segment: every A and B row pointer moves on.
	DECQ segs+72(FP)
	JZ   ntdone
	MOVQ astride+80(FP), DI
	SHLQ $2, DI
	ADDQ DI, R8
	ADDQ DI, R9
	ADDQ DI, R10
	ADDQ DI, R11
	NTBNEXT
	JMP  ntseg

ntdone:
	// Accumulator layout: B row j, A row i in Z(4j+i); c[i][j] at
	// c + 4·(i·ldc + j).
	MOVQ c+48(FP), DI
	MOVQ ldc+56(FP), DX
	SHLQ $2, DX
	MOVQ acc+64(FP), R13
	VMOVDQU32 ntlanes<>(SB), Z31
	MOVL $0x3f, R12
	KMOVW R12, K2
	NTROW(Z0, Z4, Z8, Z12, Z16, Z20)
	NTROW(Z1, Z5, Z9, Z13, Z17, Z21)
	NTROW(Z2, Z6, Z10, Z14, Z18, Z22)
	NTROW(Z3, Z7, Z11, Z15, Z19, Z23)
	VZEROUPPER
	RET

