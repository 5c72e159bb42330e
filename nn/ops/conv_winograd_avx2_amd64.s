//go:build amd64 && !purego

#include "textflag.h"

// The transforms of the Winograd convolutions (conv_winograd.go) for CPUs
// with AVX2 and FMA but no AVX-512: conv_winograd_amd64.s's wgInput16,
// wgOutput16 and wgGrad16 on 8 tiles at a time (a tile a lane of a ymm
// register; wgInputTiles and its kin call them twice for 16 tiles). The
// same operations in the same order as the AVX-512 kernels, so the same
// bits; the 16 ymm registers (against 32 zmm) leave no room for the
// constants, read from memory instead. Go's operand order: VFMADD231PS b,
// a, acc computes acc += a·b, VFNMADD231PS acc -= a·b, VSUBPS b, a, d
// d = a - b.

DATA wgY4<>+0(SB)/4, $4.0
DATA wgY4<>+4(SB)/4, $4.0
DATA wgY4<>+8(SB)/4, $4.0
DATA wgY4<>+12(SB)/4, $4.0
DATA wgY4<>+16(SB)/4, $4.0
DATA wgY4<>+20(SB)/4, $4.0
DATA wgY4<>+24(SB)/4, $4.0
DATA wgY4<>+28(SB)/4, $4.0
GLOBL wgY4<>(SB), RODATA|NOPTR, $32

DATA wgY2<>+0(SB)/4, $2.0
DATA wgY2<>+4(SB)/4, $2.0
DATA wgY2<>+8(SB)/4, $2.0
DATA wgY2<>+12(SB)/4, $2.0
DATA wgY2<>+16(SB)/4, $2.0
DATA wgY2<>+20(SB)/4, $2.0
DATA wgY2<>+24(SB)/4, $2.0
DATA wgY2<>+28(SB)/4, $2.0
GLOBL wgY2<>(SB), RODATA|NOPTR, $32

DATA wgY8<>+0(SB)/4, $8.0
DATA wgY8<>+4(SB)/4, $8.0
DATA wgY8<>+8(SB)/4, $8.0
DATA wgY8<>+12(SB)/4, $8.0
DATA wgY8<>+16(SB)/4, $8.0
DATA wgY8<>+20(SB)/4, $8.0
DATA wgY8<>+24(SB)/4, $8.0
DATA wgY8<>+28(SB)/4, $8.0
GLOBL wgY8<>(SB), RODATA|NOPTR, $32

// wgY15 is 8 int32 15s: a mask whose four outputs all lie in the image.
DATA wgY15<>+0(SB)/4, $15
DATA wgY15<>+4(SB)/4, $15
DATA wgY15<>+8(SB)/4, $15
DATA wgY15<>+12(SB)/4, $15
DATA wgY15<>+16(SB)/4, $15
DATA wgY15<>+20(SB)/4, $15
DATA wgY15<>+24(SB)/4, $15
DATA wgY15<>+28(SB)/4, $15
GLOBL wgY15<>(SB), RODATA|NOPTR, $32

// wgYMask[m] is the 4-float store mask of the bits of m (VMASKMOVPS: a
// lane is stored when its top bit is set).
#define M4(m, b0, b1, b2, b3) \
	DATA wgYMask<>+(m*16+0)(SB)/4, $b0 \
	DATA wgYMask<>+(m*16+4)(SB)/4, $b1 \
	DATA wgYMask<>+(m*16+8)(SB)/4, $b2 \
	DATA wgYMask<>+(m*16+12)(SB)/4, $b3

M4(0, 0, 0, 0, 0)
M4(1, -1, 0, 0, 0)
M4(2, 0, -1, 0, 0)
M4(3, -1, -1, 0, 0)
M4(4, 0, 0, -1, 0)
M4(5, -1, 0, -1, 0)
M4(6, 0, -1, -1, 0)
M4(7, -1, -1, -1, 0)
M4(8, 0, 0, 0, -1)
M4(9, -1, 0, 0, -1)
M4(10, 0, -1, 0, -1)
M4(11, -1, -1, 0, -1)
M4(12, 0, 0, -1, -1)
M4(13, -1, 0, -1, -1)
M4(14, 0, -1, -1, -1)
M4(15, -1, -1, -1, -1)
GLOBL wgYMask<>(SB), RODATA|NOPTR, $256

// Y6..Y11 = Bᵀ (Y0..Y5); clobbers Y12-Y14.
#define BT6Y \
	VSUBPS       Y2, Y4, Y12 \
	VSUBPS       Y1, Y3, Y13 \
	VMOVAPS      Y4, Y7 \
	VFNMADD231PS wgY4<>(SB), Y2, Y7 \
	VMOVAPS      Y3, Y14 \
	VFNMADD231PS wgY4<>(SB), Y1, Y14 \
	VSUBPS       Y14, Y7, Y8 \
	VADDPS       Y14, Y7, Y7 \
	VMOVAPS      Y12, Y9 \
	VFMADD231PS  wgY2<>(SB), Y13, Y9 \
	VMOVAPS      Y12, Y10 \
	VFNMADD231PS wgY2<>(SB), Y13, Y10 \
	VSUBPS       Y2, Y0, Y14 \
	VMOVAPS      Y12, Y6 \
	VFMADD231PS  wgY4<>(SB), Y14, Y6 \
	VSUBPS       Y3, Y5, Y11 \
	VFNMADD231PS wgY4<>(SB), Y13, Y11

// Y6..Y9 = Aᵀ (Y0..Y5); clobbers Y12-Y15.
#define AT6Y \
	VADDPS      Y2, Y1, Y12 \
	VSUBPS      Y2, Y1, Y13 \
	VADDPS      Y4, Y3, Y14 \
	VSUBPS      Y4, Y3, Y15 \
	VADDPS      Y12, Y0, Y6 \
	VADDPS      Y14, Y6, Y6 \
	VMOVAPS     Y13, Y7 \
	VFMADD231PS wgY2<>(SB), Y15, Y7 \
	VMOVAPS     Y12, Y8 \
	VFMADD231PS wgY4<>(SB), Y14, Y8 \
	VADDPS      Y13, Y5, Y9 \
	VFMADD231PS wgY8<>(SB), Y15, Y9

// Y6..Y11 = A (Y0..Y3), A = (Aᵀ)ᵀ (6x4); clobbers Y12-Y15.
#define A4Y \
	VADDPS       Y2, Y0, Y12 \
	VADDPS       Y3, Y1, Y13 \
	VADDPS       Y13, Y12, Y7 \
	VSUBPS       Y13, Y12, Y8 \
	VMOVAPS      Y0, Y14 \
	VFMADD231PS  wgY4<>(SB), Y2, Y14 \
	VMOVAPS      Y1, Y15 \
	VFMADD231PS  wgY4<>(SB), Y3, Y15 \
	VMOVAPS      Y14, Y9 \
	VFMADD231PS  wgY2<>(SB), Y15, Y9 \
	VMOVAPS      Y14, Y10 \
	VFNMADD231PS wgY2<>(SB), Y15, Y10 \
	VMOVAPS      Y0, Y6 \
	VMOVAPS      Y3, Y11

// Within each 128-bit block, the 4x4 transpose of a, b, c, d into r0..r3
// (block q of r_j holds float j of block q of a, b, c, d), t0..t3 scratch.
#define T4Y(a, b, c, d, r0, r1, r2, r3, t0, t1, t2, t3) \
	VUNPCKLPS b, a, t0 \
	VUNPCKHPS b, a, t1 \
	VUNPCKLPS d, c, t2 \
	VUNPCKHPS d, c, t3 \
	VUNPCKLPD t2, t0, r0 \
	VUNPCKHPD t2, t0, r1 \
	VUNPCKLPD t3, t1, r2 \
	VUNPCKHPD t3, t1, r3

// Y6..Y11, a row of 8 tiles' half-transformed patches, into tmp at toff;
// SI on to the patches' next row.
#define ROWOUTY(toff) \
	VMOVUPS Y6, (toff+0)(BX) \
	VMOVUPS Y7, (toff+32)(BX) \
	VMOVUPS Y8, (toff+64)(BX) \
	VMOVUPS Y9, (toff+96)(BX) \
	VMOVUPS Y10, (toff+128)(BX) \
	VMOVUPS Y11, (toff+160)(BX) \
	ADDQ    DX, SI

// Y6..Y11, column b of 8 tiles' transforms, into rows 6a+b of v (DI at
// row b, R11 six rows apart); DI on to row b+1.
#define COLOUTY \
	MOVQ    DI, R10 \
	VMOVUPS Y6, (R10) \
	ADDQ    R11, R10 \
	VMOVUPS Y7, (R10) \
	ADDQ    R11, R10 \
	VMOVUPS Y8, (R10) \
	ADDQ    R11, R10 \
	VMOVUPS Y9, (R10) \
	ADDQ    R11, R10 \
	VMOVUPS Y10, (R10) \
	ADDQ    R11, R10 \
	VMOVUPS Y11, (R10) \
	ADDQ    R9, DI

// The arguments of wgInput8AVX2 and wgGrad8AVX2: AX = off, SI = p, DX =
// wp in bytes, DI = v, R9 = ld in bytes, R11 = 6·R9, BX = tmp.
#define TILEARGSY \
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

// Taps 0-3 (into p) and 2-5 (into q) of row SI of tiles i and 4+i, into
// blocks 0 and 1 (xp, xq the low blocks): the row and nothing past it.
#define LD6Y(i, p, xp, q, xq) \
	MOVLQSX     (i*4)(AX), R10 \
	VMOVUPS     (SI)(R10*4), xp \
	VMOVUPS     8(SI)(R10*4), xq \
	MOVLQSX     (i*4+16)(AX), R10 \
	VINSERTF128 $1, (SI)(R10*4), p, p \
	VINSERTF128 $1, 8(SI)(R10*4), q, q

// One row of the 8 tiles' patches into Y0..Y5, tap j a register (T4Y
// leaves taps 0-3 of tiles 4q..4q+3 in block q, and the high halves of
// the unpacks of Y12-Y15 taps 4 and 5), then (d B) into tmp at toff.
#define INROWY(toff) \
	LD6Y(0, Y8, X8, Y12, X12) \
	LD6Y(1, Y9, X9, Y13, X13) \
	LD6Y(2, Y10, X10, Y14, X14) \
	LD6Y(3, Y11, X11, Y15, X15) \
	T4Y(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7) \
	VUNPCKHPS Y13, Y12, Y6 \
	VUNPCKHPS Y15, Y14, Y7 \
	VUNPCKLPD Y7, Y6, Y4 \
	VUNPCKHPD Y7, Y6, Y5 \
	BT6Y \
	ROWOUTY(toff)

// Column b of (d B): Bᵀ of it to rows 6a+b of v.
#define INCOLY(boff) \
	VMOVUPS (boff+0)(BX), Y0 \
	VMOVUPS (boff+192)(BX), Y1 \
	VMOVUPS (boff+384)(BX), Y2 \
	VMOVUPS (boff+576)(BX), Y3 \
	VMOVUPS (boff+768)(BX), Y4 \
	VMOVUPS (boff+960)(BX), Y5 \
	BT6Y \
	COLOUTY

// func wgInput8AVX2(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)
//
// For the 8 tiles whose 6x6 patches (rows wp apart) start at p + off[lane],
// v[ξ·ld + lane] = (Bᵀ d B)[a][b] for ξ = 6a+b. tmp: 288 floats of scratch.
TEXT ·wgInput8AVX2(SB), NOSPLIT, $0-48
	TILEARGSY
	INROWY(0)
	INROWY(192)
	INROWY(384)
	INROWY(576)
	INROWY(768)
	INROWY(960)
	INCOLY(0)
	INCOLY(32)
	INCOLY(64)
	INCOLY(96)
	INCOLY(128)
	INCOLY(160)
	VZEROUPPER
	RET

// Row SI of tiles i and 4+i into blocks 0 and 1 of dst (xdst its low block).
#define LD4Y(i, dst, xdst) \
	MOVLQSX     (i*4)(AX), R10 \
	VMOVUPS     (SI)(R10*4), xdst \
	MOVLQSX     (i*4+16)(AX), R10 \
	VINSERTF128 $1, (SI)(R10*4), dst, dst

// One row of the 8 tiles' 4x4 output-gradient patches into Y0..Y3, then
// (d Aᵀ) into tmp at toff.
#define GRADROWY(toff) \
	LD4Y(0, Y8, X8) \
	LD4Y(1, Y9, X9) \
	LD4Y(2, Y10, X10) \
	LD4Y(3, Y11, X11) \
	T4Y(Y8, Y9, Y10, Y11, Y0, Y1, Y2, Y3, Y12, Y13, Y14, Y15) \
	A4Y \
	ROWOUTY(toff)

// Column b of (d Aᵀ): A of it to rows 6a+b of v.
#define GRADCOLY(boff) \
	VMOVUPS (boff+0)(BX), Y0 \
	VMOVUPS (boff+192)(BX), Y1 \
	VMOVUPS (boff+384)(BX), Y2 \
	VMOVUPS (boff+576)(BX), Y3 \
	A4Y \
	COLOUTY

// func wgGrad8AVX2(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)
//
// For the 8 tiles whose 4x4 output-gradient patches (rows wp apart) start
// at p + off[lane], v[ξ·ld + lane] = (A d Aᵀ)[a][b] for ξ = 6a+b. tmp: 288
// floats of scratch.
TEXT ·wgGrad8AVX2(SB), NOSPLIT, $0-48
	TILEARGSY
	GRADROWY(0)
	GRADROWY(192)
	GRADROWY(384)
	GRADROWY(576)
	GRADCOLY(0)
	GRADCOLY(32)
	GRADCOLY(64)
	GRADCOLY(96)
	GRADCOLY(128)
	GRADCOLY(160)
	VZEROUPPER
	RET

// Column b of the tiles' m: Aᵀ of it into tmp rows 6r+b.
#define OUTCOLY(boff) \
	MOVQ    SI, R10 \
	VMOVUPS (R10), Y0 \
	ADDQ    R11, R10 \
	VMOVUPS (R10), Y1 \
	ADDQ    R11, R10 \
	VMOVUPS (R10), Y2 \
	ADDQ    R11, R10 \
	VMOVUPS (R10), Y3 \
	ADDQ    R11, R10 \
	VMOVUPS (R10), Y4 \
	ADDQ    R11, R10 \
	VMOVUPS (R10), Y5 \
	AT6Y \
	VMOVUPS Y6, (boff+0)(BX) \
	VMOVUPS Y7, (boff+192)(BX) \
	VMOVUPS Y8, (boff+384)(BX) \
	VMOVUPS Y9, (boff+576)(BX) \
	ADDQ    R9, SI

// VMASKMOVPS stores cost Zen 3 about twice a plain one: wgOutput8AVX2
// takes them only for lanes some of whose outputs lie outside the image.

// Lane lane's four outputs (xu) into y at DX + 4·yoff[lane].
#define STLANEFULLY(lane, xu) \
	MOVLQSX (lane*4)(R13), R14 \
	VMOVUPS xu, (DX)(R14*4)

// Lane lane's outputs (xu) into y at DX + 4·yoff[lane] where the bits of
// mask[lane] (R12) say: all four with a plain store, none, or some through
// VMASKMOVPS and wgYMask's entry. X4, R14, R15 scratch.
#define STLANEPARTY(lane, xu) \
	MOVL       (lane*4)(R12), R15 \
	TESTL      R15, R15 \
	JZ         10(PC) \
	MOVLQSX    (lane*4)(R13), R14 \
	LEAQ       (DX)(R14*4), R14 \
	CMPL       R15, $15 \
	JNE        3(PC) \
	VMOVUPS    xu, (R14) \
	JMP        4(PC) \
	SHLQ       $4, R15 \
	VMOVDQU    (R8)(R15*1), X4 \
	VMASKMOVPS xu, X4, (R14)

// func wgOutput8AVX2(m *float32, ld int, tmp *float32, y *float32, yoff *int32, w int, mask *int32)
//
// For 8 tiles with m[ξ·ld + lane] their transform-domain values, sets
// y[yoff[lane] + r·w + j] = (Aᵀ m A)[r][j] where bit j of mask[16r + lane]
// is set. tmp: 288 floats of scratch.
TEXT ·wgOutput8AVX2(SB), NOSPLIT, $0-56
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
	LEAQ wgYMask<>(SB), R8
	OUTCOLY(0)
	OUTCOLY(32)
	OUTCOLY(64)
	OUTCOLY(96)
	OUTCOLY(128)
	OUTCOLY(160)
	MOVQ $4, AX

	// Row r of Aᵀ m (BX): times A, transposed (a lane's four outputs
	// together: lanes 0-3 in the low blocks of Y12-Y15, 4-7 in their high
	// blocks, moved to Y0-Y3), into y (DX); then DX one row of y (CX
	// bytes) on, BX one row of tmp, R12 one row of masks (64 bytes).
row:
	VMOVUPS      0(BX), Y0
	VMOVUPS      32(BX), Y1
	VMOVUPS      64(BX), Y2
	VMOVUPS      96(BX), Y3
	VMOVUPS      128(BX), Y4
	VMOVUPS      160(BX), Y5
	AT6Y
	T4Y(Y6, Y7, Y8, Y9, Y12, Y13, Y14, Y15, Y0, Y1, Y2, Y3)
	VEXTRACTF128 $1, Y12, X0
	VEXTRACTF128 $1, Y13, X1
	VEXTRACTF128 $1, Y14, X2
	VEXTRACTF128 $1, Y15, X3
	VMOVDQU      (R12), Y4
	VPCMPEQD     wgY15<>(SB), Y4, Y4
	VMOVMSKPS    Y4, R15
	CMPQ         R15, $0xff
	JNE          masked
	STLANEFULLY(0, X12)
	STLANEFULLY(1, X13)
	STLANEFULLY(2, X14)
	STLANEFULLY(3, X15)
	STLANEFULLY(4, X0)
	STLANEFULLY(5, X1)
	STLANEFULLY(6, X2)
	STLANEFULLY(7, X3)
	JMP          next

	// Some outputs of the row lie outside the image: lane by lane from
	// its register, the whole four outputs (a plain store), some
	// (VMASKMOVPS) or none.
masked:
	STLANEPARTY(0, X12)
	STLANEPARTY(1, X13)
	STLANEPARTY(2, X14)
	STLANEPARTY(3, X15)
	STLANEPARTY(4, X0)
	STLANEPARTY(5, X1)
	STLANEPARTY(6, X2)
	STLANEPARTY(7, X3)

next:
	ADDQ CX, DX
	ADDQ $192, BX
	ADDQ $64, R12
	DECQ AX
	JNZ  row
	VZEROUPPER
	RET
