//go:build amd64 && !purego

#include "textflag.h"

// The even then the odd float indices of two registers (VPERMT2PS).
DATA wgEvenOdd<>+0(SB)/4, $0
DATA wgEvenOdd<>+4(SB)/4, $2
DATA wgEvenOdd<>+8(SB)/4, $4
DATA wgEvenOdd<>+12(SB)/4, $6
DATA wgEvenOdd<>+16(SB)/4, $8
DATA wgEvenOdd<>+20(SB)/4, $10
DATA wgEvenOdd<>+24(SB)/4, $12
DATA wgEvenOdd<>+28(SB)/4, $14
DATA wgEvenOdd<>+32(SB)/4, $16
DATA wgEvenOdd<>+36(SB)/4, $18
DATA wgEvenOdd<>+40(SB)/4, $20
DATA wgEvenOdd<>+44(SB)/4, $22
DATA wgEvenOdd<>+48(SB)/4, $24
DATA wgEvenOdd<>+52(SB)/4, $26
DATA wgEvenOdd<>+56(SB)/4, $28
DATA wgEvenOdd<>+60(SB)/4, $30
DATA wgEvenOdd<>+64(SB)/4, $1
DATA wgEvenOdd<>+68(SB)/4, $3
DATA wgEvenOdd<>+72(SB)/4, $5
DATA wgEvenOdd<>+76(SB)/4, $7
DATA wgEvenOdd<>+80(SB)/4, $9
DATA wgEvenOdd<>+84(SB)/4, $11
DATA wgEvenOdd<>+88(SB)/4, $13
DATA wgEvenOdd<>+92(SB)/4, $15
DATA wgEvenOdd<>+96(SB)/4, $17
DATA wgEvenOdd<>+100(SB)/4, $19
DATA wgEvenOdd<>+104(SB)/4, $21
DATA wgEvenOdd<>+108(SB)/4, $23
DATA wgEvenOdd<>+112(SB)/4, $25
DATA wgEvenOdd<>+116(SB)/4, $27
DATA wgEvenOdd<>+120(SB)/4, $29
DATA wgEvenOdd<>+124(SB)/4, $31
GLOBL wgEvenOdd<>(SB), RODATA|NOPTR, $128

// The transforms of the Winograd convolutions (conv_winograd.go), 16 tiles
// at a time, a tile a lane. Go's operand order: VFMADD231PS b, a, acc
// computes acc += a·b, VFNMADD231PS acc -= a·b, VSUBPS b, a, d d = a - b.
// Constants: Z30 = 4, Z31 = 2, Z28 = 8.

// Z6..Z11 = Bᵀ (Z0..Z5); clobbers Z12-Z14.
#define BT6 \
	VSUBPS       Z2, Z4, Z12 \
	VSUBPS       Z1, Z3, Z13 \
	VMOVAPS      Z4, Z7 \
	VFNMADD231PS Z30, Z2, Z7 \
	VMOVAPS      Z3, Z14 \
	VFNMADD231PS Z30, Z1, Z14 \
	VSUBPS       Z14, Z7, Z8 \
	VADDPS       Z14, Z7, Z7 \
	VMOVAPS      Z12, Z9 \
	VFMADD231PS  Z31, Z13, Z9 \
	VMOVAPS      Z12, Z10 \
	VFNMADD231PS Z31, Z13, Z10 \
	VSUBPS       Z2, Z0, Z14 \
	VMOVAPS      Z12, Z6 \
	VFMADD231PS  Z30, Z14, Z6 \
	VSUBPS       Z3, Z5, Z11 \
	VFNMADD231PS Z30, Z13, Z11

// Z6..Z9 = Aᵀ (Z0..Z5); clobbers Z12-Z15.
#define AT6 \
	VADDPS      Z2, Z1, Z12 \
	VSUBPS      Z2, Z1, Z13 \
	VADDPS      Z4, Z3, Z14 \
	VSUBPS      Z4, Z3, Z15 \
	VADDPS      Z12, Z0, Z6 \
	VADDPS      Z14, Z6, Z6 \
	VMOVAPS     Z13, Z7 \
	VFMADD231PS Z31, Z15, Z7 \
	VMOVAPS     Z12, Z8 \
	VFMADD231PS Z30, Z14, Z8 \
	VADDPS      Z13, Z5, Z9 \
	VFMADD231PS Z28, Z15, Z9

#define CONSTS \
	MOVL         $0x40800000, AX \
	VPBROADCASTD AX, Z30 \
	MOVL         $0x40000000, AX \
	VPBROADCASTD AX, Z31 \
	MOVL         $0x41000000, AX \
	VPBROADCASTD AX, Z28

// Taps j and j+1 (disp = 4j bytes) of one row of the 16 tiles' patches:
// gathered as pairs, 8 tiles a gather (a gather's cost is per element on
// Zen 4: half the elements of two gathers of single floats), then split
// into the even (tap j) and odd (tap j+1) floats of the pairs (Z24, Z25:
// the permutes' indices; Z29, Z27: the low and high 8 tiles' offsets).
#define GATHER2(disp, dj, dj1) \
	KXNORW     K1, K1, K1 \
	VGATHERDPD disp(SI)(Y29*4), K1, Z16 \
	KXNORW     K1, K1, K1 \
	VGATHERDPD disp(SI)(Y27*4), K1, Z17 \
	VMOVAPS    Z16, dj \
	VPERMT2PS  Z17, Z24, dj \
	VMOVAPS    Z16, dj1 \
	VPERMT2PS  Z17, Z25, dj1

// Z6..Z11, a row of 16 tiles' half-transformed patches, into tmp at toff;
// SI on to the patches' next row.
#define ROWOUT(toff) \
	VMOVUPS Z6, (toff+0)(BX) \
	VMOVUPS Z7, (toff+64)(BX) \
	VMOVUPS Z8, (toff+128)(BX) \
	VMOVUPS Z9, (toff+192)(BX) \
	VMOVUPS Z10, (toff+256)(BX) \
	VMOVUPS Z11, (toff+320)(BX) \
	ADDQ    DX, SI

// Z6..Z11, column b of 16 tiles' transforms, into rows 6a+b of v (DI at
// row b, R11 six rows apart); DI on to row b+1.
#define COLOUT \
	MOVQ    DI, R10 \
	VMOVUPS Z6, (R10) \
	ADDQ    R11, R10 \
	VMOVUPS Z7, (R10) \
	ADDQ    R11, R10 \
	VMOVUPS Z8, (R10) \
	ADDQ    R11, R10 \
	VMOVUPS Z9, (R10) \
	ADDQ    R11, R10 \
	VMOVUPS Z10, (R10) \
	ADDQ    R11, R10 \
	VMOVUPS Z11, (R10) \
	ADDQ    R9, DI

// One row of the 16 tiles' patches: (d B) into tmp at toff.
#define INROW(toff) \
	GATHER2(0, Z0, Z1) \
	GATHER2(8, Z2, Z3) \
	GATHER2(16, Z4, Z5) \
	BT6 \
	ROWOUT(toff)

// Column b of (d B): Bᵀ of it to rows 6a+b of v (DI at row b, R11 six
// rows apart).
#define INCOL(boff) \
	VMOVUPS (boff+0)(BX), Z0 \
	VMOVUPS (boff+384)(BX), Z1 \
	VMOVUPS (boff+768)(BX), Z2 \
	VMOVUPS (boff+1152)(BX), Z3 \
	VMOVUPS (boff+1536)(BX), Z4 \
	VMOVUPS (boff+1920)(BX), Z5 \
	BT6 \
	COLOUT

// The six columns of (d B): Bᵀ d B into v.
#define INCOLS \
	INCOL(0) \
	INCOL(64) \
	INCOL(128) \
	INCOL(192) \
	INCOL(256) \
	INCOL(320)

// The arguments of wgInput16 and wgGrad16: AX = off, SI = p,
// DX = wp in bytes, DI = v, R9 = ld in bytes, R11 = 6·R9, BX = tmp, and the
// constants (CONSTS first: it sets AX).
#define TILEARGSLD \
	CONSTS \
	MOVQ p+0(FP), SI \
	MOVQ off+8(FP), AX \
	MOVQ wp+16(FP), DX \
	SHLQ $2, DX \
	MOVQ v+24(FP), DI \
	MOVQ ld+32(FP), R9 \
	SHLQ $2, R9 \
	LEAQ (R9)(R9*2), R11 \
	SHLQ $1, R11 \
	MOVQ tmp+40(FP), BX

// The arguments of wgInput16Gather and wgGrad16Gather: TILEARGSLD's, and
// Z29 and Y27 the low and high 8 tiles' offsets, Z24 and Z25 GATHER2's
// permutes.
#define TILEARGS \
	TILEARGSLD \
	VMOVDQU32     (AX), Z29 \
	VEXTRACTI32X8 $1, Z29, Y27 \
	MOVQ          $wgEvenOdd<>(SB), AX \
	VMOVDQU32     (AX), Z24 \
	VMOVDQU32     64(AX), Z25

// func wgInput16Gather(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)
//
// wgInput16 with its rows gathered (GATHER2): the reference its tests
// compare with bit for bit.
TEXT ·wgInput16Gather(SB), NOSPLIT, $0-48
	TILEARGS
	INROW(0)
	INROW(384)
	INROW(768)
	INROW(1152)
	INROW(1536)
	INROW(1920)
	INCOLS
	VZEROUPPER
	RET

// Column b of the tiles' m: Aᵀ of it into tmp rows 6r+b.
#define OUTCOL(boff) \
	MOVQ    SI, R10 \
	VMOVUPS (R10), Z0 \
	ADDQ    R11, R10 \
	VMOVUPS (R10), Z1 \
	ADDQ    R11, R10 \
	VMOVUPS (R10), Z2 \
	ADDQ    R11, R10 \
	VMOVUPS (R10), Z3 \
	ADDQ    R11, R10 \
	VMOVUPS (R10), Z4 \
	ADDQ    R11, R10 \
	VMOVUPS (R10), Z5 \
	AT6 \
	VMOVUPS Z6, (boff+0)(BX) \
	VMOVUPS Z7, (boff+384)(BX) \
	VMOVUPS Z8, (boff+768)(BX) \
	VMOVUPS Z9, (boff+1152)(BX) \
	ADDQ    R9, SI

// Lane lane of a transposed output row (u, 128-bit block blk: the lane's
// four outputs) into y at DX + 4·yoff[lane], the outputs whose bits are
// set in the lane's mask (R12, moff + 4·lane) only: those inside the image.
#define STLANE(lane, u, blk, moff) \
	MOVLQSX       (lane*4)(R13), R14 \
	LEAQ          (DX)(R14*4), R14 \
	KMOVW         (moff+lane*4)(R12), K2 \
	VEXTRACTF32X4 $blk, u, K2, (R14)

// Row r of Aᵀ m: times A, transposed (a lane's four outputs together),
// into y (DX, then one row of y, CX bytes, on); moff = 64·r.
#define OUTROW(toff, moff) \
	VMOVUPS   (toff+0)(BX), Z0 \
	VMOVUPS   (toff+64)(BX), Z1 \
	VMOVUPS   (toff+128)(BX), Z2 \
	VMOVUPS   (toff+192)(BX), Z3 \
	VMOVUPS   (toff+256)(BX), Z4 \
	VMOVUPS   (toff+320)(BX), Z5 \
	AT6 \
	VUNPCKLPS Z7, Z6, Z16 \
	VUNPCKHPS Z7, Z6, Z17 \
	VUNPCKLPS Z9, Z8, Z18 \
	VUNPCKHPS Z9, Z8, Z19 \
	VUNPCKLPD Z18, Z16, Z20 \
	VUNPCKHPD Z18, Z16, Z21 \
	VUNPCKLPD Z19, Z17, Z22 \
	VUNPCKHPD Z19, Z17, Z23 \
	STLANE(0, Z20, 0, moff) \
	STLANE(1, Z21, 0, moff) \
	STLANE(2, Z22, 0, moff) \
	STLANE(3, Z23, 0, moff) \
	STLANE(4, Z20, 1, moff) \
	STLANE(5, Z21, 1, moff) \
	STLANE(6, Z22, 1, moff) \
	STLANE(7, Z23, 1, moff) \
	STLANE(8, Z20, 2, moff) \
	STLANE(9, Z21, 2, moff) \
	STLANE(10, Z22, 2, moff) \
	STLANE(11, Z23, 2, moff) \
	STLANE(12, Z20, 3, moff) \
	STLANE(13, Z21, 3, moff) \
	STLANE(14, Z22, 3, moff) \
	STLANE(15, Z23, 3, moff) \
	ADDQ      CX, DX

// func wgOutput16(m *float32, ld int, tmp *float32, y *float32, yoff *int32, w int, mask *int32)
//
// For 16 tiles with m[ξ·ld + lane] their transform-domain values, sets
// y[yoff[lane] + r·w + j] = (Aᵀ m A)[r][j] where bit j of mask[16r + lane]
// is set. tmp: 576 floats of scratch.
TEXT ·wgOutput16(SB), NOSPLIT, $0-56
	MOVQ m+0(FP), SI
	MOVQ ld+8(FP), R9
	SHLQ $2, R9
	LEAQ (R9)(R9*2), R11
	SHLQ $1, R11
	MOVQ tmp+16(FP), BX
	MOVQ y+24(FP), DX
	MOVQ yoff+32(FP), R13
	MOVQ w+40(FP), CX
	SHLQ $2, CX
	MOVQ mask+48(FP), R12
	CONSTS
	OUTCOL(0)
	OUTCOL(64)
	OUTCOL(128)
	OUTCOL(192)
	OUTCOL(256)
	OUTCOL(320)
	OUTROW(0, 0)
	OUTROW(384, 64)
	OUTROW(768, 128)
	OUTROW(1152, 192)
	VZEROUPPER
	RET

// Z6..Z11 = A (Z0..Z3), A = (Aᵀ)ᵀ (6x4): z0, z0+z1+z2+z3, z0-z1+z2-z3,
// z0+2z1+4z2+8z3, z0-2z1+4z2-8z3, z3; clobbers Z12-Z15.
#define A4 \
	VADDPS       Z2, Z0, Z12 \
	VADDPS       Z3, Z1, Z13 \
	VADDPS       Z13, Z12, Z7 \
	VSUBPS       Z13, Z12, Z8 \
	VMOVAPS      Z0, Z14 \
	VFMADD231PS  Z30, Z2, Z14 \
	VMOVAPS      Z1, Z15 \
	VFMADD231PS  Z30, Z3, Z15 \
	VMOVAPS      Z14, Z9 \
	VFMADD231PS  Z31, Z15, Z9 \
	VMOVAPS      Z14, Z10 \
	VFNMADD231PS Z31, Z15, Z10 \
	VMOVAPS      Z0, Z6 \
	VMOVAPS      Z3, Z11

// One row of the 16 tiles' 4x4 output-gradient patches: (d Aᵀ) into tmp
// at toff.
#define GRADROW(toff) \
	GATHER2(0, Z0, Z1) \
	GATHER2(8, Z2, Z3) \
	A4 \
	ROWOUT(toff)

// Column b of (d Aᵀ): A of it to rows 6a+b of v (DI at row b, R11 six
// rows apart).
#define GRADCOL(boff) \
	VMOVUPS (boff+0)(BX), Z0 \
	VMOVUPS (boff+384)(BX), Z1 \
	VMOVUPS (boff+768)(BX), Z2 \
	VMOVUPS (boff+1152)(BX), Z3 \
	A4 \
	COLOUT

// The six columns of (d Aᵀ): A d Aᵀ into v.
#define GRADCOLS \
	GRADCOL(0) \
	GRADCOL(64) \
	GRADCOL(128) \
	GRADCOL(192) \
	GRADCOL(256) \
	GRADCOL(320)

// func wgGrad16Gather(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)
//
// wgGrad16 with its rows gathered (GATHER2): the reference its tests
// compare with bit for bit.
TEXT ·wgGrad16Gather(SB), NOSPLIT, $0-48
	TILEARGS
	GRADROW(0)
	GRADROW(384)
	GRADROW(768)
	GRADROW(1152)
	GRADCOLS
	VZEROUPPER
	RET

// wgInput16 and wgGrad16 load each tile's row 4 floats at a time into a
// 128-bit block (wgGrad16: the row; wgInput16: taps 0-3, and 2-5 into a
// second register), four tiles a register, and transpose the registers,
// within blocks, into a tap a register, a tile a lane: a gather of 8
// pairs costs Zen 4 about 8 loads, a block 1 load and 1 insert, and a
// row of the 16 tiles 4 (wgGrad16) or 12 (wgInput16) shuffles. The loads
// read the rows and nothing past them (a row may end the buffer), and the
// lanes hold the values the gathers put there: the transforms, and the
// bits, are the same. wgInput16 takes 85-89 ns for 16 tiles where the
// gathers took 143-149, wgGrad16 48-55 where they took 81-86 (go test
// ./nn/ops -run '^$' -bench WinogradTransforms -benchtime 20000x,
// GOMAXPROCS=1, the least of 5 runs, load 3.8-5 on 2 cores).

// Within each 128-bit block, the 4x4 transpose of a, b, c, d: block q of
// r_j holds float j of block q of a, b, c, d; clobbers Z24-Z27.
#define T4(a, b, c, d, r0, r1, r2, r3) \
	VUNPCKLPS b, a, Z24 \
	VUNPCKHPS b, a, Z25 \
	VUNPCKLPS d, c, Z26 \
	VUNPCKHPS d, c, Z27 \
	VUNPCKLPD Z26, Z24, r0 \
	VUNPCKHPD Z26, Z24, r1 \
	VUNPCKLPD Z27, Z25, r2 \
	VUNPCKHPD Z27, Z25, r3

// Taps 0-3 (into p) and 2-5 (into q) of row SI of tiles i, 4+i, 8+i,
// 12+i, into blocks 0-3 (xp, xq the low blocks).
#define LD6(i, p, xp, q, xq) \
	MOVLQSX      (i*4)(AX), R10 \
	VMOVUPS      (SI)(R10*4), xp \
	VMOVUPS      8(SI)(R10*4), xq \
	MOVLQSX      (i*4+16)(AX), R10 \
	VINSERTF32X4 $1, (SI)(R10*4), p, p \
	VINSERTF32X4 $1, 8(SI)(R10*4), q, q \
	MOVLQSX      (i*4+32)(AX), R10 \
	VINSERTF32X4 $2, (SI)(R10*4), p, p \
	VINSERTF32X4 $2, 8(SI)(R10*4), q, q \
	MOVLQSX      (i*4+48)(AX), R10 \
	VINSERTF32X4 $3, (SI)(R10*4), p, p \
	VINSERTF32X4 $3, 8(SI)(R10*4), q, q

// One row of the 16 tiles' patches into Z0..Z5, tap j a register (block q
// of Z16+i and Z20+i holds tile 4q+i: T4 leaves tap j of tiles 4q..4q+3
// in block q of Z0+j, and the high halves of the unpacks of Z20-Z23 taps
// 4 and 5), then (d B) into tmp at toff.
#define INROWLD(toff) \
	LD6(0, Z16, X16, Z20, X20) \
	LD6(1, Z17, X17, Z21, X21) \
	LD6(2, Z18, X18, Z22, X22) \
	LD6(3, Z19, X19, Z23, X23) \
	T4(Z16, Z17, Z18, Z19, Z0, Z1, Z2, Z3) \
	VUNPCKHPS Z21, Z20, Z24 \
	VUNPCKHPS Z23, Z22, Z25 \
	VUNPCKLPD Z25, Z24, Z4 \
	VUNPCKHPD Z25, Z24, Z5 \
	BT6 \
	ROWOUT(toff)

// func wgInput16(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)
//
// For the 16 tiles whose 6x6 patches (rows wp apart) start at p + off[lane],
// v[ξ·ld + lane] = (Bᵀ d B)[a][b] for ξ = 6a+b. tmp: 576 floats of scratch.
TEXT ·wgInput16(SB), NOSPLIT, $0-48
	TILEARGSLD
	INROWLD(0)
	INROWLD(384)
	INROWLD(768)
	INROWLD(1152)
	INROWLD(1536)
	INROWLD(1920)
	INCOLS
	VZEROUPPER
	RET

// Row SI of tiles i, 4+i, 8+i, 12+i into blocks 0-3 of dst (xdst its low
// block).
#define LD4(i, dst, xdst) \
	MOVLQSX      (i*4)(AX), R10 \
	VMOVUPS      (SI)(R10*4), xdst \
	MOVLQSX      (i*4+16)(AX), R10 \
	VINSERTF32X4 $1, (SI)(R10*4), dst, dst \
	MOVLQSX      (i*4+32)(AX), R10 \
	VINSERTF32X4 $2, (SI)(R10*4), dst, dst \
	MOVLQSX      (i*4+48)(AX), R10 \
	VINSERTF32X4 $3, (SI)(R10*4), dst, dst

// One row of the 16 tiles' 4x4 output-gradient patches into Z0..Z3 (block
// q of Z16+i holds tile 4q+i: T4 leaves tap j of tiles 4q..4q+3 in its
// block q), then (d Aᵀ) into tmp at toff.
#define GRADROWLD(toff) \
	LD4(0, Z16, X16) \
	LD4(1, Z17, X17) \
	LD4(2, Z18, X18) \
	LD4(3, Z19, X19) \
	T4(Z16, Z17, Z18, Z19, Z0, Z1, Z2, Z3) \
	A4 \
	ROWOUT(toff)

// func wgGrad16(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)
//
// For the 16 tiles whose 4x4 output-gradient patches (rows wp apart) start
// at p + off[lane], v[ξ·ld + lane] = (A d Aᵀ)[a][b] for ξ = 6a+b: the
// gradient with respect to the transform-domain products of wgOutput16.
// tmp: 384 floats of scratch.
TEXT ·wgGrad16(SB), NOSPLIT, $0-48
	TILEARGSLD
	GRADROWLD(0)
	GRADROWLD(384)
	GRADROWLD(768)
	GRADROWLD(1152)
	GRADCOLS
	VZEROUPPER
	RET
