//go:build amd64 && !purego

#include "textflag.h"

// The Winograd kernel's transforms in AVX2: the forward's (winogradKernel,
// eight channel pairs a register, wgG's operations in float32) and the
// weight gradient's (winogradKernelGrad, four a register, wgGT's in
// float64), one each, in their order and precision (no fused
// multiply-add), so that each lane's bits are the Go loops' and the
// AVX-512 kernels'. Go's operand order: VSUBPD b, a, d computes d = a - b.

// o0..o4 = the first five of wgG(g0, g1, g2) (the sixth is g2), o0 and o2
// written last into g0 and g1; constants Y10 = 1/24, Y11 = 1/6, Y12 =
// 1/12, Y13 = 0.25, Y14 = -1/6; clobbers Y3-Y6.
#define WGG8(g0, g1, g2, o1, o3, o4) \
	VADDPS g2, g0, Y3 \
	VMULPS Y10, g0, Y4 \
	VMULPS Y11, g2, Y6 \
	VADDPS Y6, Y4, Y4 \
	VMULPS Y12, g1, Y5 \
	VMULPS Y13, g0, g0 \
	VADDPS g1, Y3, Y6 \
	VMULPS Y14, Y6, o1 \
	VSUBPS g1, Y3, Y6 \
	VMULPS Y14, Y6, g1 \
	VADDPS Y5, Y4, o3 \
	VSUBPS Y5, Y4, o4

// Taps j, 3+j and 6+j of the 8 kernels (rows of 8 floats from AX), then
// column j of t = G k (6x3, t[i] at 32i from R8).
#define KCOL8(j) \
	VMOVUPS (32*(j))(AX), Y0 \
	VMOVUPS (32*(3+j))(AX), Y1 \
	VMOVUPS (32*(6+j))(AX), Y2 \
	WGG8(Y0, Y1, Y2, Y7, Y8, Y9) \
	VMOVUPS Y0, (32*(j))(R8) \
	VMOVUPS Y7, (32*(3+j))(R8) \
	VMOVUPS Y1, (32*(6+j))(R8) \
	VMOVUPS Y8, (32*(9+j))(R8) \
	VMOVUPS Y9, (32*(12+j))(R8) \
	VMOVUPS Y2, (32*(15+j))(R8)

// Row a of t times Gᵀ: values 6a..6a+5 of the 36, each stored at DI, DI
// advanced by DX after each.
#define KROW8(a) \
	VMOVUPS (32*(3*a))(R8), Y0 \
	VMOVUPS (32*(3*a+1))(R8), Y1 \
	VMOVUPS (32*(3*a+2))(R8), Y2 \
	WGG8(Y0, Y1, Y2, Y7, Y8, Y9) \
	VMOVUPS Y0, (DI) \
	ADDQ    DX, DI \
	VMOVUPS Y7, (DI) \
	ADDQ    DX, DI \
	VMOVUPS Y1, (DI) \
	ADDQ    DX, DI \
	VMOVUPS Y8, (DI) \
	ADDQ    DX, DI \
	VMOVUPS Y9, (DI) \
	ADDQ    DX, DI \
	VMOVUPS Y2, (DI) \
	ADDQ    DX, DI

// func wgKernel8AVX2(k *float32, u *float32, us int, cst *float32, tmp *float32)
//
// U = G k Gᵀ for 8 kernels, tap j of kernel l at k[8j + l] (72 floats),
// its 36 values at u + ξ·us (floats, 8 adjacent: kernel l at l); cst:
// 1/24, 1/6, 1/12, 0.25, -1/6; tmp 144 floats (t).
TEXT ·wgKernel8AVX2(SB), NOSPLIT, $0-40
	MOVQ         k+0(FP), AX
	MOVQ         u+8(FP), DI
	MOVQ         us+16(FP), DX
	SHLQ         $2, DX
	MOVQ         cst+24(FP), SI
	MOVQ         tmp+32(FP), R8
	VBROADCASTSS 0(SI), Y10
	VBROADCASTSS 4(SI), Y11
	VBROADCASTSS 8(SI), Y12
	VBROADCASTSS 12(SI), Y13
	VBROADCASTSS 16(SI), Y14
	KCOL8(0)
	KCOL8(1)
	KCOL8(2)
	KROW8(0)
	KROW8(1)
	KROW8(2)
	KROW8(3)
	KROW8(4)
	KROW8(5)
	VZEROUPPER
	RET

// r0, r1, r2 = wgGT(z0, ..., z5) in float64; constants Y12 = 0.25, Y13 =
// 1/6, Y14 = 1/24, Y15 = 1/12; overwrites z1..z3 (with d, p, q) and
// clobbers Y10, Y11; r0..r2 must differ from z1..z5.
#define WGGT4(z0, z1, z2, z3, z4, z5, r0, r1, r2) \
	VADDPD z2, z1, Y10 \
	VSUBPD z1, z2, z1 \
	VADDPD z4, z3, z2 \
	VSUBPD z4, z3, z3 \
	VMULPD Y12, z0, r0 \
	VMULPD Y13, Y10, Y11 \
	VSUBPD Y11, r0, r0 \
	VMULPD Y14, z2, Y11 \
	VADDPD Y11, r0, r0 \
	VMULPD Y13, z1, r1 \
	VMULPD Y15, z3, Y11 \
	VADDPD Y11, r1, r1 \
	VSUBPD Y10, z2, Y11 \
	VMULPD Y13, Y11, Y11 \
	VADDPD z5, Y11, r2

// Column b of dU for 4 pairs (values b, 6+b, ..., 30+b: lines 64 bytes
// apart from R9) as float64, then column b of t = Gᵀ dU (3x6, t[k] at
// 2304 + 32k from R8).
#define GCOL4(b) \
	VCVTPS2PD (64*(b))(R9), Y0 \
	VCVTPS2PD (64*(6+b))(R9), Y1 \
	VCVTPS2PD (64*(12+b))(R9), Y2 \
	VCVTPS2PD (64*(18+b))(R9), Y3 \
	VCVTPS2PD (64*(24+b))(R9), Y4 \
	VCVTPS2PD (64*(30+b))(R9), Y5 \
	WGGT4(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8) \
	VMOVUPD Y6, (2304+32*(b))(R8) \
	VMOVUPD Y7, (2304+32*(6+b))(R8) \
	VMOVUPD Y8, (2304+32*(12+b))(R8)

// Lane l of X (4 floats): tap at DI + 36l + off.
#define TAP4(X, off) \
	VMOVSS     X, (off)(DI) \
	VEXTRACTPS $1, X, (36+off)(DI) \
	VEXTRACTPS $2, X, (72+off)(DI) \
	VEXTRACTPS $3, X, (108+off)(DI)

// Row i of t times G: taps 3i..3i+2 of the 4 kernels, as float32, 9
// floats a pair from DI.
#define GROW4(i) \
	VMOVUPD    (2304+32*(6*i))(R8), Y0 \
	VMOVUPD    (2304+32*(6*i+1))(R8), Y1 \
	VMOVUPD    (2304+32*(6*i+2))(R8), Y2 \
	VMOVUPD    (2304+32*(6*i+3))(R8), Y3 \
	VMOVUPD    (2304+32*(6*i+4))(R8), Y4 \
	VMOVUPD    (2304+32*(6*i+5))(R8), Y5 \
	WGGT4(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8) \
	VCVTPD2PSY Y6, X6 \
	VCVTPD2PSY Y7, X7 \
	VCVTPD2PSY Y8, X8 \
	TAP4(X6, 12*i) \
	TAP4(X7, 12*i+4) \
	TAP4(X8, 12*i+8)

// dw = Gᵀ dU G for the 4 pairs whose lines start at R9 (64 bytes apart).
#define KGRAD4 \
	GCOL4(0) \
	GCOL4(1) \
	GCOL4(2) \
	GCOL4(3) \
	GCOL4(4) \
	GCOL4(5) \
	GROW4(0) \
	GROW4(1) \
	GROW4(2)

// func wgKernelGrad16AVX2(du *float32, occ int, dw *float32, cst *float64, tmp *float32)
//
// dw = Gᵀ dU G for 16 channel pairs: pair l's 36 values at du + l + ξ·occ
// (floats), its 9 taps at dw + 9l; cst: 0.25, 1/6, 1/24, 1/12; tmp 720
// floats: the pairs' 36 lines copied first (36·16 floats; read where they
// are, OC·C floats apart, the lines share an L1 set at 64x64 channels), then
// t for 4 pairs (18·4 float64).
TEXT ·wgKernelGrad16AVX2(SB), NOSPLIT, $0-40
	MOVQ du+0(FP), R9
	MOVQ occ+8(FP), DX
	SHLQ $2, DX
	MOVQ dw+16(FP), DI
	MOVQ cst+24(FP), SI
	MOVQ tmp+32(FP), R8
	MOVQ R8, R11
	MOVQ $36, CX

copy:
	VMOVUPS (R9), Y0
	VMOVUPS 32(R9), Y1
	VMOVUPS Y0, (R11)
	VMOVUPS Y1, 32(R11)
	ADDQ    DX, R9
	ADDQ    $64, R11
	DECQ    CX
	JNZ     copy
	VBROADCASTSD 0(SI), Y12
	VBROADCASTSD 8(SI), Y13
	VBROADCASTSD 16(SI), Y14
	VBROADCASTSD 24(SI), Y15
	MOVQ R8, R9
	KGRAD4
	LEAQ 16(R8), R9
	ADDQ $144, DI
	KGRAD4
	LEAQ 32(R8), R9
	ADDQ $144, DI
	KGRAD4
	LEAQ 48(R8), R9
	ADDQ $144, DI
	KGRAD4
	VZEROUPPER
	RET
