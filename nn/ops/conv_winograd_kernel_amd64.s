//go:build amd64 && !purego

#include "textflag.h"

// The kernel's transforms of the Winograd convolutions (conv_winograd.go),
// in AVX-512: the operations of wgG and wgGT, one each, in their order and
// precision (no fused multiply-add), so that each lane's bits are the Go
// loops'. Go's operand order: VSUBPS b, a, d computes d = a - b.

// Offsets 9·l of lane l's 9 taps (VSCATTERDPS).
DATA wgNine<>+0(SB)/4, $0
DATA wgNine<>+4(SB)/4, $9
DATA wgNine<>+8(SB)/4, $18
DATA wgNine<>+12(SB)/4, $27
DATA wgNine<>+16(SB)/4, $36
DATA wgNine<>+20(SB)/4, $45
DATA wgNine<>+24(SB)/4, $54
DATA wgNine<>+28(SB)/4, $63
GLOBL wgNine<>(SB), RODATA|NOPTR, $32

// o0..o4 = the first five of wgG(g0, g1, g2) (the sixth is g2); constants
// Z27 = 1/24, Z28 = 1/6, Z29 = 1/12, Z30 = 0.25, Z31 = -1/6; clobbers
// Z3-Z6.
#define WGG(g0, g1, g2, o0, o1, o2, o3, o4) \
	VADDPS g2, g0, Z3 \
	VMULPS Z27, g0, Z4 \
	VMULPS Z28, g2, Z6 \
	VADDPS Z6, Z4, Z4 \
	VMULPS Z29, g1, Z5 \
	VMULPS Z30, g0, o0 \
	VADDPS g1, Z3, Z6 \
	VMULPS Z31, Z6, o1 \
	VSUBPS g1, Z3, Z6 \
	VMULPS Z31, Z6, o2 \
	VADDPS Z5, Z4, o3 \
	VSUBPS Z5, Z4, o4

// Taps j, 3+j and 6+j of the 16 kernels (at byte offsets d0, d1, d2 from
// AX, lanes Z2 floats apart) into Z0, Z1 and g2, then column j of t = G k:
// rows 0-4 into o0..o4 (row 5 is g2).
#define KCOL(d0, d1, d2, g2, o0, o1, o2, o3, o4) \
	KXNORW     K1, K1, K1 \
	VGATHERDPS d0(AX)(Z2*4), K1, Z0 \
	KXNORW     K1, K1, K1 \
	VGATHERDPS d1(AX)(Z2*4), K1, Z1 \
	KXNORW     K1, K1, K1 \
	VGATHERDPS d2(AX)(Z2*4), K1, g2 \
	WGG(Z0, Z1, g2, o0, o1, o2, o3, o4)

// Row a of t (t0, t1, t2) times Gᵀ: values 6a..6a+5 of the 36, each
// stored at DI, DI advanced by DX after each.
#define KROW(t0, t1, t2) \
	WGG(t0, t1, t2, Z0, Z1, Z2, Z7, Z8) \
	VMOVUPS Z0, (DI) \
	ADDQ    DX, DI \
	VMOVUPS Z1, (DI) \
	ADDQ    DX, DI \
	VMOVUPS Z2, (DI) \
	ADDQ    DX, DI \
	VMOVUPS Z7, (DI) \
	ADDQ    DX, DI \
	VMOVUPS Z8, (DI) \
	ADDQ    DX, DI \
	VMOVUPS t2, (DI) \
	ADDQ    DX, DI

// func wgKernel16(w *float32, idx *int32, u *float32, us int, cst *float32, flip bool)
//
// U = G k Gᵀ for 16 kernels, lane l's 9 taps at w + idx[l] (floats),
// reversed when flip (the input gradient's kernel, flipped in space), its
// 36 values at u + ξ·us (floats), ξ = 0..35; cst: 1/24, 1/6, 1/12, 0.25,
// -1/6. t = G k lives in Z9..Z26 (t[i] in Z(9+i), 6x3 row-major).
TEXT ·wgKernel16(SB), NOSPLIT, $0-41
	MOVQ         w+0(FP), AX
	MOVQ         idx+8(FP), BX
	MOVQ         u+16(FP), DI
	MOVQ         us+24(FP), DX
	SHLQ         $2, DX
	MOVQ         cst+32(FP), SI
	VMOVDQU32    (BX), Z2
	VBROADCASTSS 0(SI), Z27
	VBROADCASTSS 4(SI), Z28
	VBROADCASTSS 8(SI), Z29
	VBROADCASTSS 12(SI), Z30
	VBROADCASTSS 16(SI), Z31
	CMPB         flip+40(FP), $0
	JNE          flipped
	KCOL(0, 12, 24, Z24, Z9, Z12, Z15, Z18, Z21)
	KCOL(4, 16, 28, Z25, Z10, Z13, Z16, Z19, Z22)
	KCOL(8, 20, 32, Z26, Z11, Z14, Z17, Z20, Z23)
	JMP          rows

flipped:
	KCOL(32, 20, 8, Z24, Z9, Z12, Z15, Z18, Z21)
	KCOL(28, 16, 4, Z25, Z10, Z13, Z16, Z19, Z22)
	KCOL(24, 12, 0, Z26, Z11, Z14, Z17, Z20, Z23)

rows:
	KROW(Z9, Z10, Z11)
	KROW(Z12, Z13, Z14)
	KROW(Z15, Z16, Z17)
	KROW(Z18, Z19, Z20)
	KROW(Z21, Z22, Z23)
	KROW(Z24, Z25, Z26)
	VZEROUPPER
	RET

// r0, r1, r2 = wgGT(z0, ..., z5) in float64; constants Z28 = 0.25, Z29 =
// 1/6, Z30 = 1/24, Z31 = 1/12; overwrites z1..z3 (with d, p, q) and
// clobbers Z26, Z27; r0..r2 must differ from z1..z5.
#define WGGT(z0, z1, z2, z3, z4, z5, r0, r1, r2) \
	VADDPD z2, z1, Z26 \
	VSUBPD z1, z2, z1 \
	VADDPD z4, z3, z2 \
	VSUBPD z4, z3, z3 \
	VMULPD Z28, z0, r0 \
	VMULPD Z29, Z26, Z27 \
	VSUBPD Z27, r0, r0 \
	VMULPD Z30, z2, Z27 \
	VADDPD Z27, r0, r0 \
	VMULPD Z29, z1, r1 \
	VMULPD Z31, z3, Z27 \
	VADDPD Z27, r1, r1 \
	VSUBPD Z26, z2, Z27 \
	VMULPD Z29, Z27, Z27 \
	VADDPD z5, Z27, r2

// Column b of dU (values b, 6+b, ..., 30+b at R9, R9 + R10, ...; R10 =
// 6 matrices) as float64 into Z0..Z5, then column b of t = Gᵀ dU into
// r0..r2.
#define GCOL(r0, r1, r2) \
	MOVQ      R9, R11 \
	VCVTPS2PD (R11), Z0 \
	ADDQ      R10, R11 \
	VCVTPS2PD (R11), Z1 \
	ADDQ      R10, R11 \
	VCVTPS2PD (R11), Z2 \
	ADDQ      R10, R11 \
	VCVTPS2PD (R11), Z3 \
	ADDQ      R10, R11 \
	VCVTPS2PD (R11), Z4 \
	ADDQ      R10, R11 \
	VCVTPS2PD (R11), Z5 \
	ADDQ      DX, R9 \
	WGGT(Z0, Z1, Z2, Z3, Z4, Z5, r0, r1, r2)

// Row i of t (t0..t5) times G: taps 3i..3i+2 of the 8 kernels, as float32,
// scattered 9 floats a lane from DI (Y7: the lanes' offsets).
#define GROW(i, t0, t1, t2, t3, t4, t5) \
	WGGT(t0, t1, t2, t3, t4, t5, Z0, Z1, Z2) \
	VCVTPD2PS   Z0, Y0 \
	VCVTPD2PS   Z1, Y1 \
	VCVTPD2PS   Z2, Y2 \
	KXNORW      K1, K1, K1 \
	VSCATTERDPS Y0, K1, (12*i)(DI)(Y7*4) \
	KXNORW      K1, K1, K1 \
	VSCATTERDPS Y1, K1, (12*i+4)(DI)(Y7*4) \
	KXNORW      K1, K1, K1 \
	VSCATTERDPS Y2, K1, (12*i+8)(DI)(Y7*4)

// dw = Gᵀ dU G for the 8 pairs of dU at R9 (matrices DX bytes apart, R10
// = 6·DX), taps to DI; Y7 and Z28-Z31 set as wgKernelGrad8 sets them.
#define KGRAD8 \
	GCOL(Z8, Z14, Z20) \
	GCOL(Z9, Z15, Z21) \
	GCOL(Z10, Z16, Z22) \
	GCOL(Z11, Z17, Z23) \
	GCOL(Z12, Z18, Z24) \
	GCOL(Z13, Z19, Z25) \
	GROW(0, Z8, Z9, Z10, Z11, Z12, Z13) \
	GROW(1, Z14, Z15, Z16, Z17, Z18, Z19) \
	GROW(2, Z20, Z21, Z22, Z23, Z24, Z25)

#define KGRADCONSTS \
	VMOVDQU32    wgNine<>(SB), Y7 \
	VBROADCASTSD 0(SI), Z28 \
	VBROADCASTSD 8(SI), Z29 \
	VBROADCASTSD 16(SI), Z30 \
	VBROADCASTSD 24(SI), Z31

// func wgKernelGrad8(du *float32, occ int, dw *float32, cst *float64)
//
// dw = Gᵀ dU G for 8 channel pairs: pair l's 36 values at du + l + ξ·occ
// (floats), its 9 taps at dw + 9l; cst: 0.25, 1/6, 1/24, 1/12. t = Gᵀ dU
// (3x6) lives in Z8..Z25 (t[i] in Z(8+i)).
TEXT ·wgKernelGrad8(SB), NOSPLIT, $0-32
	MOVQ du+0(FP), R9
	MOVQ occ+8(FP), DX
	SHLQ $2, DX
	MOVQ dw+16(FP), DI
	MOVQ cst+24(FP), SI
	LEAQ (DX)(DX*2), R10
	SHLQ $1, R10
	KGRADCONSTS
	KGRAD8
	VZEROUPPER
	RET

// func wgKernelGrad16(du *float32, occ int, dw *float32, cst *float64, tmp *float32)
//
// wgKernelGrad8 for 16 pairs, from a copy of their 36 lines in tmp (36·16
// floats): read where they are, OC·C floats apart, a 16 KB stride at 64x64
// channels, the 36 lines of the first 8 pairs share one L1 set and are
// gone when the next 8 read them again.
TEXT ·wgKernelGrad16(SB), NOSPLIT, $0-40
	MOVQ    du+0(FP), R9
	MOVQ    occ+8(FP), DX
	SHLQ    $2, DX
	MOVQ    dw+16(FP), DI
	MOVQ    cst+24(FP), SI
	MOVQ    tmp+32(FP), R8
	MOVQ    R8, R11
	MOVQ    $36, CX

copy:
	VMOVUPS (R9), Z0
	VMOVUPS Z0, (R11)
	ADDQ    DX, R9
	ADDQ    $64, R11
	DECQ    CX
	JNZ     copy
	MOVQ    $64, DX
	MOVQ    $384, R10
	KGRADCONSTS
	MOVQ    R8, R9
	KGRAD8
	LEAQ    32(R8), R9
	ADDQ    $288, DI
	KGRAD8
	VZEROUPPER
	RET
