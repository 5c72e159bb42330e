//go:build amd64 && !purego

#include "textflag.h"
#include "sgemm_amd64.h"

// The multiply kernels of sgemm_amd64.s for CPUs with AVX2 and FMA but no
// AVX-512 (AMD Zen 2 and 3, Intel client CPUs): 16 ymm registers of 8
// lanes hold a quarter of the 8x32 tile or half of the 4x6 one, so each
// kernel walks its tile in register-sized pieces (4x16 and 2x6), reading
// its operands again for each piece (from L1/L2: a chunk's B rows).

// avx2lanes holds the lane numbers 0-15: "lane < n" masks for the partial
// columns of sgemmNN8x32AVX2.
DATA avx2lanes<>+0(SB)/4, $0
DATA avx2lanes<>+4(SB)/4, $1
DATA avx2lanes<>+8(SB)/4, $2
DATA avx2lanes<>+12(SB)/4, $3
DATA avx2lanes<>+16(SB)/4, $4
DATA avx2lanes<>+20(SB)/4, $5
DATA avx2lanes<>+24(SB)/4, $6
DATA avx2lanes<>+28(SB)/4, $7
DATA avx2lanes<>+32(SB)/4, $8
DATA avx2lanes<>+36(SB)/4, $9
DATA avx2lanes<>+40(SB)/4, $10
DATA avx2lanes<>+44(SB)/4, $11
DATA avx2lanes<>+48(SB)/4, $12
DATA avx2lanes<>+52(SB)/4, $13
DATA avx2lanes<>+56(SB)/4, $14
DATA avx2lanes<>+60(SB)/4, $15
GLOBL avx2lanes<>(SB), RODATA|NOPTR, $64

// Zeroes the accumulators Y0-Y7.
#define ZERO8Y \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

// One row of a 4x16 piece: acc(lo), acc(hi) += broadcast(ap[r]) · (Y8, Y9).
#define NN2ROW(off, lo, hi) \
	VBROADCASTSS off(AX), Y10 \
	VFMADD231PS  Y8, Y10, lo \
	VFMADD231PS  Y9, Y10, hi

#define NN2ROWS \
	NN2ROW(0, Y0, Y1) \
	NN2ROW(4, Y2, Y3) \
	NN2ROW(8, Y4, Y5) \
	NN2ROW(12, Y6, Y7) \
	ADDQ $32, AX \
	ADDQ $4, R8 \
	DECQ CX

// Stores a row of the piece into c (the columns of masks Y14, Y15), adding
// c first when R10 is non-zero, then moves DI to the next row.
#define NN2STORE(lo, hi) \
	TESTQ      R10, R10 \
	JZ         5(PC) \
	VMASKMOVPS (DI), Y14, Y8 \
	VADDPS     Y8, lo, lo \
	VMASKMOVPS 32(DI), Y15, Y9 \
	VADDPS     Y9, hi, hi \
	VMASKMOVPS lo, Y14, (DI) \
	VMASKMOVPS hi, Y15, 32(DI) \
	ADDQ       DX, DI

// NN2STORE for a piece of all 16 columns: plain loads and stores (a
// VMASKMOVPS store costs Zen 3 several times a VMOVUPS).
#define NN2STOREF(lo, hi) \
	TESTQ   R10, R10 \
	JZ      3(PC) \
	VADDPS  (DI), lo, lo \
	VADDPS  32(DI), hi, hi \
	VMOVUPS lo, (DI) \
	VMOVUPS hi, 32(DI) \
	ADDQ    DX, DI

// func sgemmNN8x32AVX2(k int, ap *float32, b *float32, boff *int32, c *float32, ldc int, ncols int, acc int)
//
// sgemmNN8x32 for columns 0 to ncols-1 (1 ≤ ncols ≤ 32; the others are
// neither read nor written), in four 4x16 pieces. Each c element is the same
// chain of fused multiply-adds in kk order as sgemmNN8x32's: the same bits.
TEXT ·sgemmNN8x32AVX2(SB), NOSPLIT, $0-64
	MOVQ ldc+40(FP), DX
	SHLQ $2, DX
	MOVQ acc+56(FP), R10
	XORQ R11, R11 // first column of the piece: 0 or 16

nnhalf:
	MOVQ ncols+48(FP), BX
	SUBQ R11, BX // columns of this half
	JLE  nndone
	MOVQ         BX, X13
	VPBROADCASTD X13, Y13
	VPCMPGTD     avx2lanes<>+0(SB), Y13, Y14
	VPCMPGTD     avx2lanes<>+32(SB), Y13, Y15
	XORQ         R12, R12 // byte offset of the piece's first row in an ap group: 0 or 16

nnpiece:
	MOVQ   k+0(FP), CX
	MOVQ   ap+8(FP), AX
	ADDQ   R12, AX
	MOVQ   b+16(FP), SI
	LEAQ   (SI)(R11*4), SI
	MOVQ   boff+24(FP), R8
	ZERO8Y
	CMPQ   BX, $16
	JLT    nnmasked

nnfull:
	MOVLQSX (R8), R9
	VMOVUPS (SI)(R9*4), Y8
	VMOVUPS 32(SI)(R9*4), Y9
	NN2ROWS
	JNZ     nnfull
	JMP     nnstore

nnmasked:
	MOVLQSX    (R8), R9
	VMASKMOVPS (SI)(R9*4), Y14, Y8
	VMASKMOVPS 32(SI)(R9*4), Y15, Y9
	NN2ROWS
	JNZ        nnmasked

nnstore:
	MOVQ c+32(FP), DI
	LEAQ (DI)(R11*4), DI
	TESTQ R12, R12
	JZ   2(PC)
	LEAQ (DI)(DX*4), DI
	CMPQ BX, $16
	JLT  nnstorem
	NN2STOREF(Y0, Y1)
	NN2STOREF(Y2, Y3)
	NN2STOREF(Y4, Y5)
	NN2STOREF(Y6, Y7)
	JMP  nnnext

nnstorem:
	NN2STORE(Y0, Y1)
	NN2STORE(Y2, Y3)
	NN2STORE(Y4, Y5)
	NN2STORE(Y6, Y7)

nnnext:
	ADDQ $16, R12
	CMPQ R12, $32
	JLT  nnpiece
	ADDQ $16, R11
	CMPQ R11, $32
	JLT  nnhalf

nndone:
	VZEROUPPER
	RET

// One row of a 4x24 piece: three accumulators += broadcast(ap[r]) · (Y12,
// Y13, Y14).
#define NN3ROW(off, a0, a1, a2) \
	VBROADCASTSS off(AX), Y15 \
	VFMADD231PS  Y12, Y15, a0 \
	VFMADD231PS  Y13, Y15, a1 \
	VFMADD231PS  Y14, Y15, a2

// Stores a row of a 4x24 piece into c at DI (adding c first when R10 is
// non-zero), then moves DI to the next row.
#define NN3STORE(a0, a1, a2) \
	TESTQ   R10, R10 \
	JZ      4(PC) \
	VADDPS  (DI), a0, a0 \
	VADDPS  32(DI), a1, a1 \
	VADDPS  64(DI), a2, a2 \
	VMOVUPS a0, (DI) \
	VMOVUPS a1, 32(DI) \
	VMOVUPS a2, 64(DI) \
	ADDQ    DX, DI

// func sgemmNN8x24AVX2(k int, ap *float32, b *float32, boff *int32, c *float32, ldc int, acc int)
//
// sgemmNN8x32AVX2 for 24 whole columns, in two 4x24 pieces: twelve
// accumulators a piece where the 4x16 pieces have eight, so the fused
// multiply-adds of a step outnumber its loads 12 to 8 (8 to 7) and twelve
// chains hide the multiply-add's latency. Each c element is the same chain
// of fused multiply-adds in kk order: the same bits.
TEXT ·sgemmNN8x24AVX2(SB), NOSPLIT, $0-56
	MOVQ ldc+40(FP), DX
	SHLQ $2, DX
	MOVQ acc+48(FP), R10
	XORQ R12, R12 // byte offset of the piece's first row in an ap group: 0 or 16

n24piece:
	MOVQ   k+0(FP), CX
	MOVQ   ap+8(FP), AX
	ADDQ   R12, AX
	MOVQ   b+16(FP), SI
	MOVQ   boff+24(FP), R8
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

n24loop:
	MOVLQSX (R8), R9
	VMOVUPS (SI)(R9*4), Y12
	VMOVUPS 32(SI)(R9*4), Y13
	VMOVUPS 64(SI)(R9*4), Y14
	NN3ROW(0, Y0, Y1, Y2)
	NN3ROW(4, Y3, Y4, Y5)
	NN3ROW(8, Y6, Y7, Y8)
	NN3ROW(12, Y9, Y10, Y11)
	ADDQ    $32, AX
	ADDQ    $4, R8
	DECQ    CX
	JNZ     n24loop

	MOVQ  c+32(FP), DI
	TESTQ R12, R12
	JZ    2(PC)
	LEAQ  (DI)(DX*4), DI
	NN3STORE(Y0, Y1, Y2)
	NN3STORE(Y3, Y4, Y5)
	NN3STORE(Y6, Y7, Y8)
	NN3STORE(Y9, Y10, Y11)
	ADDQ  $16, R12
	CMPQ  R12, $32
	JLT   n24piece
	VZEROUPPER
	RET

// avx2tail holds 16 all-ones lanes then 16 zeros: the 8 lanes at
// avx2tail + 4·(16 - t + o) are the mask of lanes o..o+7 below t.
DATA avx2tail<>+0(SB)/8, $-1
DATA avx2tail<>+8(SB)/8, $-1
DATA avx2tail<>+16(SB)/8, $-1
DATA avx2tail<>+24(SB)/8, $-1
DATA avx2tail<>+32(SB)/8, $-1
DATA avx2tail<>+40(SB)/8, $-1
DATA avx2tail<>+48(SB)/8, $-1
DATA avx2tail<>+56(SB)/8, $-1
DATA avx2tail<>+64(SB)/8, $0
DATA avx2tail<>+72(SB)/8, $0
DATA avx2tail<>+80(SB)/8, $0
DATA avx2tail<>+88(SB)/8, $0
DATA avx2tail<>+96(SB)/8, $0
DATA avx2tail<>+104(SB)/8, $0
DATA avx2tail<>+112(SB)/8, $0
DATA avx2tail<>+120(SB)/8, $0
GLOBL avx2tail<>(SB), RODATA|NOPTR, $128

// Two FMAs of one B row (8 lanes at bptr+BX+off) against the two A rows
// (Y12, Y13).
#define NT2COL(bptr, off, a0, a1) \
	VMOVUPS     off(bptr)(BX*1), Y14 \
	VFMADD231PS Y14, Y12, a0 \
	VFMADD231PS Y14, Y13, a1

// The same, 8 lanes masked by Y15.
#define NT2COLM(bptr, off, a0, a1) \
	VMASKMOVPS  off(bptr)(BX*1), Y15, Y14 \
	VFMADD231PS Y14, Y12, a0 \
	VFMADD231PS Y14, Y13, a1

#define NT2STEP(off) \
	VMOVUPS off(R8)(BX*1), Y12 \
	VMOVUPS off(R9)(BX*1), Y13 \
	NT2COL(AX, off, Y0, Y1) \
	NT2COL(CX, off, Y2, Y3) \
	NT2COL(DX, off, Y4, Y5) \
	NT2COL(R12, off, Y6, Y7) \
	NT2COL(R13, off, Y8, Y9) \
	NT2COL(SI, off, Y10, Y11)

#define NT2STEPM(off) \
	VMASKMOVPS off(R8)(BX*1), Y15, Y12 \
	VMASKMOVPS off(R9)(BX*1), Y15, Y13 \
	NT2COLM(AX, off, Y0, Y1) \
	NT2COLM(CX, off, Y2, Y3) \
	NT2COLM(DX, off, Y4, Y5) \
	NT2COLM(R12, off, Y6, Y7) \
	NT2COLM(R13, off, Y8, Y9) \
	NT2COLM(SI, off, Y10, Y11)

// Sums the lanes of the six accumulators a0-a5 (one A row against the six
// B rows) into c[0:6] at DI, or adds them to it when acc is non-zero, then
// moves DI to the next row. Y12-Y15 scratch; each sum is
// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
#define NT2ROW(a0, a1, a2, a3, a4, a5) \
	VHADDPS      a1, a0, Y12 \
	VHADDPS      a3, a2, Y13 \
	VHADDPS      Y13, Y12, Y12 \
	VEXTRACTF128 $1, Y12, X13 \
	VADDPS       X13, X12, X12 \
	VHADDPS      a5, a4, Y14 \
	VHADDPS      Y14, Y14, Y14 \
	VEXTRACTF128 $1, Y14, X15 \
	VADDPS       X15, X14, X14 \
	CMPQ         acc+64(FP), $0 \
	JEQ          5(PC) \
	VMOVUPS      (DI), X13 \
	VADDPS       X13, X12, X12 \
	VMOVSD       16(DI), X15 \
	VADDPS       X15, X14, X14 \
	VMOVUPS      X12, (DI) \
	VMOVSD       X14, 16(DI) \
	ADDQ         R10, DI

// func sgemmNT4x6AVX2(n16 int, tail uint32, a *float32, lda int, b *float32, boff *int32, c *float32, ldc int, acc int, segs, astride, bstride int)
//
// sgemmNT4x6 in two 2x6 pieces (rows 0-1, then 2-3), 8 lanes a vector: the
// same sums in another order (8 lanes summed across once, not 16).
TEXT ·sgemmNT4x6AVX2(SB), NOSPLIT, $8-96
	XORQ R11, R11 // the piece: 0 or 1

ntpiece:
	MOVQ a+16(FP), R8
	MOVQ lda+24(FP), DX
	SHLQ $2, DX
	TESTQ R11, R11
	JZ   3(PC)
	LEAQ (R8)(DX*1), R8
	LEAQ (R8)(DX*1), R8
	LEAQ (R8)(DX*1), R9
	NTBROWS
	// A row pointers: R8, R9. B row pointers: AX, CX, DX, R12, R13, SI.
	// Byte index: BX. Iterations: DI. Segments left: left-8(SP).
	MOVQ segs+72(FP), DI
	MOVQ DI, left-8(SP)
	ZERO8Y
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

ntseg:
	XORQ BX, BX
	MOVQ n16+0(FP), DI
	TESTQ DI, DI
	JZ   nttail

ntloop:
	NT2STEP(0)
	NT2STEP(32)
	ADDQ $64, BX
	DECQ DI
	JNZ  ntloop

nttail:
	MOVL    tail+8(FP), DI
	POPCNTL DI, DI
	JZ      ntnext
	// Lanes 0-7 of the tail, then 8-15 (masked out when the tail is shorter).
	// Lanes 8-15 wholly masked out (a tail of 8 or fewer) add nothing
	// (an accumulator, from +0, is never -0): skipped.
	NEGQ    DI
	LEAQ    avx2tail<>+64(SB), R10
	LEAQ    (R10)(DI*4), DI
	VMOVDQU (DI), Y15
	NT2STEPM(0)
	VMOVDQU 32(DI), Y15
	VPTEST  Y15, Y15
	JZ      ntnext
	NT2STEPM(32)

ntnext:
	// The next segment: every A and B row pointer moves on.
	DECQ left-8(SP)
	JZ   ntdone
	MOVQ astride+80(FP), DI
	SHLQ $2, DI
	ADDQ DI, R8
	ADDQ DI, R9
	NTBNEXT
	JMP  ntseg

ntdone:
	// Accumulator layout: B row j, A row i of the piece in Y(2j+i).
	MOVQ c+48(FP), DI
	MOVQ ldc+56(FP), R10
	SHLQ $2, R10
	TESTQ R11, R11
	JZ   3(PC)
	ADDQ R10, DI
	ADDQ R10, DI
	NT2ROW(Y0, Y2, Y4, Y6, Y8, Y10)
	NT2ROW(Y1, Y3, Y5, Y7, Y9, Y11)
	INCQ R11
	CMPQ R11, $2
	JLT  ntpiece
	VZEROUPPER
	RET

// The four B rows of sgemmNT4x4AVX2: AX, CX, DX, R12 at b + 4·boff[j]
// (DI and SI scratch).
#define NT4BROWS \
	MOVQ    b+32(FP), SI \
	MOVQ    boff+40(FP), DI \
	MOVLQSX 0(DI), AX \
	LEAQ    (SI)(AX*4), AX \
	MOVLQSX 4(DI), CX \
	LEAQ    (SI)(CX*4), CX \
	MOVLQSX 8(DI), DX \
	LEAQ    (SI)(DX*4), DX \
	MOVLQSX 12(DI), R12 \
	LEAQ    (SI)(R12*4), R12

#define NT4STEP(off) \
	VMOVUPS off(R8)(BX*1), Y12 \
	VMOVUPS off(R9)(BX*1), Y13 \
	NT2COL(AX, off, Y0, Y1) \
	NT2COL(CX, off, Y2, Y3) \
	NT2COL(DX, off, Y4, Y5) \
	NT2COL(R12, off, Y6, Y7)

#define NT4STEPM(off) \
	VMASKMOVPS off(R8)(BX*1), Y15, Y12 \
	VMASKMOVPS off(R9)(BX*1), Y15, Y13 \
	NT2COLM(AX, off, Y0, Y1) \
	NT2COLM(CX, off, Y2, Y3) \
	NT2COLM(DX, off, Y4, Y5) \
	NT2COLM(R12, off, Y6, Y7)

// NT2ROW's first four sums (the same operations: the same bits) into
// c[0:4] at DI, then DI to the next row (R10 bytes on).
#define NT4ROW(a0, a1, a2, a3) \
	VHADDPS      a1, a0, Y12 \
	VHADDPS      a3, a2, Y13 \
	VHADDPS      Y13, Y12, Y12 \
	VEXTRACTF128 $1, Y12, X13 \
	VADDPS       X13, X12, X12 \
	CMPQ         acc+64(FP), $0 \
	JEQ          3(PC) \
	VMOVUPS      (DI), X13 \
	VADDPS       X13, X12, X12 \
	VMOVUPS      X12, (DI) \
	ADDQ         R10, DI

// func sgemmNT4x4AVX2(n16 int, tail uint32, a *float32, lda int, b *float32, boff *int32, c *float32, ldc int, acc int, segs, astride, bstride int)
//
// sgemmNT4x6AVX2 for four B rows (c's 4x4 block at c, ldc apart), in two
// 2x4 pieces of eight accumulators: each sum as sgemmNT4x6AVX2's, the
// same bits. The tiles of 4 columns that end a row of c whose width is not
// a multiple of 6 take it where sgemmNT4x6AVX2 would compute 6 columns
// into scratch.
TEXT ·sgemmNT4x4AVX2(SB), NOSPLIT, $8-96
	XORQ R11, R11 // the piece: 0 or 1

n4piece:
	MOVQ  a+16(FP), R8
	MOVQ  lda+24(FP), R13
	SHLQ  $2, R13
	TESTQ R11, R11
	JZ    3(PC)
	LEAQ  (R8)(R13*1), R8
	LEAQ  (R8)(R13*1), R8
	LEAQ  (R8)(R13*1), R9
	NT4BROWS
	// A row pointers: R8, R9. B row pointers: AX, CX, DX, R12. Byte
	// index: BX. Iterations: DI. Segments left: left-8(SP).
	MOVQ  segs+72(FP), DI
	MOVQ  DI, left-8(SP)
	ZERO8Y

n4seg:
	XORQ  BX, BX
	MOVQ  n16+0(FP), DI
	TESTQ DI, DI
	JZ    n4tail

n4loop:
	NT4STEP(0)
	NT4STEP(32)
	ADDQ $64, BX
	DECQ DI
	JNZ  n4loop

n4tail:
	MOVL    tail+8(FP), DI
	POPCNTL DI, DI
	JZ      n4next
	NEGQ    DI
	LEAQ    avx2tail<>+64(SB), R10
	LEAQ    (R10)(DI*4), DI
	VMOVDQU (DI), Y15
	NT4STEPM(0)
	VMOVDQU 32(DI), Y15
	VPTEST  Y15, Y15
	JZ      n4next
	NT4STEPM(32)

n4next:
	DECQ left-8(SP)
	JZ   n4done
	MOVQ astride+80(FP), DI
	SHLQ $2, DI
	ADDQ DI, R8
	ADDQ DI, R9
	MOVQ bstride+88(FP), DI
	SHLQ $2, DI
	ADDQ DI, AX
	ADDQ DI, CX
	ADDQ DI, DX
	ADDQ DI, R12
	JMP  n4seg

n4done:
	// B row j, A row i of the piece in Y(2j+i).
	MOVQ  c+48(FP), DI
	MOVQ  ldc+56(FP), R10
	SHLQ  $2, R10
	TESTQ R11, R11
	JZ    3(PC)
	ADDQ  R10, DI
	ADDQ  R10, DI
	NT4ROW(Y0, Y2, Y4, Y6)
	NT4ROW(Y1, Y3, Y5, Y7)
	INCQ  R11
	CMPQ  R11, $2
	JLT   n4piece
	VZEROUPPER
	RET
