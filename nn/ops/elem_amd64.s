//go:build amd64 && !purego

#include "textflag.h"
#include "elem_amd64.h"

// float32 elementwise kernels of kernels.go, AVX-512: 16 lanes a step and a
// masked tail (no element outside [0, n) is read or written). Go's operand
// order: VMAXPS a, b, dst is dst = b > a ? b : a, which returns a when
// either is NaN, so the input goes first to let NaN through as Go's max does.

// func affine32(x, y *float32, n int, s, b float32, relu int)
// y[i] = x[i]·s + b, then max(·, 0) when relu != 0.
TEXT ·affine32(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VBROADCASTSS s+24(FP), Z1
	VBROADCASTSS b+28(FP), Z2
	MOVQ relu+32(FP), R8
	VPXORD Z3, Z3, Z3
	MOVQ CX, R9
	SHRQ $4, R9
	XORQ BX, BX
	TESTQ R9, R9
	JZ   afftail
affloop:
	VMOVUPS (SI)(BX*1), Z0
	VFMADD213PS Z2, Z1, Z0 // Z0 = Z0·Z1 + Z2
	TESTQ R8, R8
	JZ   2(PC)
	VMAXPS Z0, Z3, Z0
	VMOVUPS Z0, (DI)(BX*1)
	ADDQ $64, BX
	DECQ R9
	JNZ  affloop
afftail:
	TAILMASK(affdone)
	VMOVUPS.Z (SI)(BX*1), K1, Z0
	VFMADD213PS Z2, Z1, Z0
	TESTQ R8, R8
	JZ   2(PC)
	VMAXPS Z0, Z3, Z0
	VMOVUPS Z0, K1, (DI)(BX*1)
affdone:
	VZEROUPPER
	RET

// func addRelu32(a, b, y *float32, n int)
// y[i] = max(a[i] + b[i], 0).
TEXT ·addRelu32(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), R10
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	VPXORD Z3, Z3, Z3
	MOVQ CX, R9
	SHRQ $4, R9
	XORQ BX, BX
	TESTQ R9, R9
	JZ   artail
arloop:
	VMOVUPS (SI)(BX*1), Z0
	VADDPS  (R10)(BX*1), Z0, Z0
	VMAXPS  Z0, Z3, Z0
	VMOVUPS Z0, (DI)(BX*1)
	ADDQ $64, BX
	DECQ R9
	JNZ  arloop
artail:
	TAILMASK(ardone)
	VMOVUPS.Z (SI)(BX*1), K1, Z0
	VMOVUPS.Z (R10)(BX*1), K1, Z1
	VADDPS  Z1, Z0, Z0
	VMAXPS  Z0, Z3, Z0
	VMOVUPS Z0, K1, (DI)(BX*1)
ardone:
	VZEROUPPER
	RET

// func add32(a, b, y *float32, n int)
// y[i] = a[i] + b[i].
TEXT ·add32(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), R10
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ CX, R9
	SHRQ $4, R9
	XORQ BX, BX
	TESTQ R9, R9
	JZ   adtail
adloop:
	VMOVUPS (SI)(BX*1), Z0
	VADDPS  (R10)(BX*1), Z0, Z0
	VMOVUPS Z0, (DI)(BX*1)
	ADDQ $64, BX
	DECQ R9
	JNZ  adloop
adtail:
	TAILMASK(addone)
	VMOVUPS.Z (SI)(BX*1), K1, Z0
	VMOVUPS.Z (R10)(BX*1), K1, Z1
	VADDPS  Z1, Z0, Z0
	VMOVUPS Z0, K1, (DI)(BX*1)
addone:
	VZEROUPPER
	RET

// func maskPos32AVX(y, dy, dx *float32, n int)
// dx[i] = dy[i] where y[i] is not ≤ 0 (positive or NaN), else +0.
TEXT ·maskPos32AVX(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), SI
	MOVQ dy+8(FP), R10
	MOVQ dx+16(FP), DI
	MOVQ n+24(FP), CX
	VPXORD Z3, Z3, Z3
	MOVQ CX, R9
	SHRQ $4, R9
	XORQ BX, BX
	TESTQ R9, R9
	JZ   mptail
mploop:
	VMOVUPS (SI)(BX*1), Z0
	VCMPPS  $0x16, Z3, Z0, K2 // NLE_UQ: not (y ≤ 0)
	VMOVUPS.Z (R10)(BX*1), K2, Z1
	VMOVUPS Z1, (DI)(BX*1)
	ADDQ $64, BX
	DECQ R9
	JNZ  mploop
mptail:
	TAILMASK(mpdone)
	VMOVUPS.Z (SI)(BX*1), K1, Z0
	VCMPPS  $0x16, Z3, Z0, K1, K2
	VMOVUPS.Z (R10)(BX*1), K2, Z1
	VMOVUPS Z1, K1, (DI)(BX*1)
mpdone:
	VZEROUPPER
	RET

// func lincomb32(d, x, out *float32, n int, a, b, k float32)
// out[i] = a·d[i] + b·x[i] + k.
TEXT ·lincomb32(SB), NOSPLIT, $0-44
	MOVQ d+0(FP), SI
	MOVQ x+8(FP), R10
	MOVQ out+16(FP), DI
	MOVQ n+24(FP), CX
	VBROADCASTSS a+32(FP), Z4
	VBROADCASTSS b+36(FP), Z5
	VBROADCASTSS k+40(FP), Z6
	MOVQ CX, R9
	SHRQ $4, R9
	XORQ BX, BX
	TESTQ R9, R9
	JZ   lctail
lcloop:
	VMOVUPS (R10)(BX*1), Z0
	VMULPS  Z5, Z0, Z0
	VMOVUPS (SI)(BX*1), Z1
	VFMADD231PS Z4, Z1, Z0 // Z0 += d·a
	VADDPS  Z6, Z0, Z0
	VMOVUPS Z0, (DI)(BX*1)
	ADDQ $64, BX
	DECQ R9
	JNZ  lcloop
lctail:
	TAILMASK(lcdone)
	VMOVUPS.Z (R10)(BX*1), K1, Z0
	VMULPS  Z5, Z0, Z0
	VMOVUPS.Z (SI)(BX*1), K1, Z1
	VFMADD231PS Z4, Z1, Z0
	VADDPS  Z6, Z0, Z0
	VMOVUPS Z0, K1, (DI)(BX*1)
lcdone:
	VZEROUPPER
	RET

// func shiftedSums32(x *float32, n int, k float32) (s, sq float32)
// Σ(x-k) and Σ(x-k)², in two 16-lane accumulators each.
TEXT ·shiftedSums32(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS k+16(FP), Z4
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	MOVQ CX, R9
	SHRQ $5, R9
	XORQ BX, BX
	TESTQ R9, R9
	JZ   sshalf
ssloop:
	VMOVUPS (SI)(BX*1), Z5
	VMOVUPS 64(SI)(BX*1), Z6
	VSUBPS  Z4, Z5, Z5
	VSUBPS  Z4, Z6, Z6
	VADDPS  Z5, Z0, Z0
	VADDPS  Z6, Z1, Z1
	VFMADD231PS Z5, Z5, Z2
	VFMADD231PS Z6, Z6, Z3
	ADDQ $128, BX
	DECQ R9
	JNZ  ssloop
sshalf:
	TESTQ $16, CX
	JZ   sstail
	VMOVUPS (SI)(BX*1), Z5
	VSUBPS  Z4, Z5, Z5
	VADDPS  Z5, Z0, Z0
	VFMADD231PS Z5, Z5, Z2
	ADDQ $64, BX
sstail:
	TAILMASK(ssdone)
	VMOVUPS.Z (SI)(BX*1), K1, Z5
	VSUBPS.Z Z4, Z5, K1, Z5
	VADDPS  Z5, Z1, Z1
	VFMADD231PS Z5, Z5, Z3
ssdone:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	HSUM(Z0, Y0, X0, s+24(FP))
	HSUM(Z2, Y2, X2, sq+28(FP))
	VZEROUPPER
	RET

// func dotSums32(d, x *float32, n int) (s, sx float32)
// Σd and Σd·x, in two 16-lane accumulators each.
TEXT ·dotSums32(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), SI
	MOVQ x+8(FP), R10
	MOVQ n+16(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	MOVQ CX, R9
	SHRQ $5, R9
	XORQ BX, BX
	TESTQ R9, R9
	JZ   dshalf
dsloop:
	VMOVUPS (SI)(BX*1), Z5
	VMOVUPS 64(SI)(BX*1), Z6
	VADDPS  Z5, Z0, Z0
	VADDPS  Z6, Z1, Z1
	VFMADD231PS (R10)(BX*1), Z5, Z2
	VFMADD231PS 64(R10)(BX*1), Z6, Z3
	ADDQ $128, BX
	DECQ R9
	JNZ  dsloop
dshalf:
	TESTQ $16, CX
	JZ   dstail
	VMOVUPS (SI)(BX*1), Z5
	VADDPS  Z5, Z0, Z0
	VFMADD231PS (R10)(BX*1), Z5, Z2
	ADDQ $64, BX
dstail:
	TAILMASK(dsdone)
	VMOVUPS.Z (SI)(BX*1), K1, Z5
	VMOVUPS.Z (R10)(BX*1), K1, Z6
	VADDPS  Z5, Z1, Z1
	VFMADD231PS Z6, Z5, Z3
dsdone:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	HSUM(Z0, Y0, X0, s+24(FP))
	HSUM(Z2, Y2, X2, sx+28(FP))
	VZEROUPPER
	RET

// Sets kreg to the low n%16 lanes of n (in reg, clobbered), R13 scratch.
#define LANEMASK(reg, kreg) \
	ANDQ  $15, reg \
	MOVL  $1, R13 \
	SHLXL reg, R13, R13 \
	DECL  R13 \
	KMOVW R13, kreg

// func copyRows32(dst *float32, ldd int, src *float32, lds int, w, gap, rows int)
// For r < rows: dst[r·ldd + j] = src[r·lds + j] for j < w, then
// dst[r·ldd + w + j] = 0 for j < gap. Nothing else is read or written.
TEXT ·copyRows32(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	SHLQ $2, R8
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), R9
	SHLQ $2, R9
	MOVQ w+32(FP), AX
	MOVQ gap+40(FP), DX
	MOVQ rows+48(FP), CX
	TESTQ CX, CX
	JZ   crdone
	MOVQ AX, R10
	SHRQ $4, R10
	MOVQ AX, R12
	LANEMASK(R12, K1)
	MOVQ DX, R11
	SHRQ $4, R11
	MOVQ DX, R12
	LANEMASK(R12, K2)
	SHLQ $2, AX
	VPXORD Z1, Z1, Z1
crrow:
	XORQ BX, BX
	MOVQ R10, R12
	TESTQ R12, R12
	JZ   crtail
crloop:
	VMOVUPS (SI)(BX*1), Z0
	VMOVUPS Z0, (DI)(BX*1)
	ADDQ $64, BX
	DECQ R12
	JNZ  crloop
crtail:
	VMOVUPS.Z (SI)(BX*1), K1, Z0
	VMOVUPS   Z0, K1, (DI)(BX*1)
	LEAQ (DI)(AX*1), R13
	XORQ BX, BX
	MOVQ R11, R12
	TESTQ R12, R12
	JZ   crgtail
crgloop:
	VMOVUPS Z1, (R13)(BX*1)
	ADDQ $64, BX
	DECQ R12
	JNZ  crgloop
crgtail:
	VMOVUPS Z1, K2, (R13)(BX*1)
	ADDQ R9, SI
	ADDQ R8, DI
	DECQ CX
	JNZ  crrow
crdone:
	VZEROUPPER
	RET
