//go:build amd64 && !purego

#include "textflag.h"

// The kernels of kernels.go, 8 float32 or 4 float64 lanes at a time with AVX2: the same
// IEEE operations in the same order as the Go loops, and no FMA, so the
// results are identical bit for bit. Go's operand order: VDIVPS b, a, dst
// computes dst = a / b.

// func adam32AVX2(p, grads, m, v *float32, n int, k *adamK32, wd int)
// adamK32: wd 0, decay 4, b1 8, omb1 12, b2 16, omb2 20, bc2s 24, eps 28, negStep 32.
TEXT ·adam32AVX2(SB), NOSPLIT, $0-56
	MOVQ p+0(FP), DI
	MOVQ grads+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), AX
	MOVQ wd+48(FP), DX
	VBROADCASTSS 0(AX), Y0
	VBROADCASTSS 4(AX), Y1
	VBROADCASTSS 8(AX), Y2
	VBROADCASTSS 12(AX), Y3
	VBROADCASTSS 16(AX), Y4
	VBROADCASTSS 20(AX), Y5
	VBROADCASTSS 24(AX), Y6
	VBROADCASTSS 28(AX), Y7
	VBROADCASTSS 32(AX), Y8
	SHLQ $2, CX
	XORQ BX, BX
	TESTQ DX, DX
	JNZ adamwd

adamloop:
	VMOVUPS (DI)(BX*1), Y9
	VMULPS  Y1, Y9, Y9           // pi = p*decay
	VMOVUPS (SI)(BX*1), Y10      // gi = g
	VMOVUPS (R8)(BX*1), Y11
	VMULPS  Y2, Y11, Y11         // m*b1
	VMULPS  Y3, Y10, Y12         // g*omb1
	VADDPS  Y12, Y11, Y11        // mi
	VMOVUPS Y11, (R8)(BX*1)
	VMOVUPS (R9)(BX*1), Y12
	VMULPS  Y4, Y12, Y12         // v*b2
	VMULPS  Y5, Y10, Y13         // omb2*g
	VMULPS  Y10, Y13, Y13        // *g
	VADDPS  Y13, Y12, Y12        // vi
	VMOVUPS Y12, (R9)(BX*1)
	VSQRTPS Y12, Y12
	VDIVPS  Y6, Y12, Y12         // sqrt(vi)/bc2s
	VADDPS  Y7, Y12, Y12         // d = ... + eps
	VMULPS  Y8, Y11, Y13         // negStep*mi
	VDIVPS  Y12, Y13, Y13        // /d
	VADDPS  Y13, Y9, Y9          // pi + ...
	VMOVUPS Y9, (DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, CX
	JB      adamloop
	VZEROUPPER
	RET

adamwd:
	VMOVUPS (DI)(BX*1), Y9
	VMULPS  Y1, Y9, Y9           // pi = p*decay
	VMULPS  Y0, Y9, Y10          // wd*pi
	VMOVUPS (SI)(BX*1), Y11
	VADDPS  Y10, Y11, Y10        // gi = g + wd*pi
	VMOVUPS (R8)(BX*1), Y11
	VMULPS  Y2, Y11, Y11
	VMULPS  Y3, Y10, Y12
	VADDPS  Y12, Y11, Y11        // mi
	VMOVUPS Y11, (R8)(BX*1)
	VMOVUPS (R9)(BX*1), Y12
	VMULPS  Y4, Y12, Y12
	VMULPS  Y5, Y10, Y13
	VMULPS  Y10, Y13, Y13
	VADDPS  Y13, Y12, Y12        // vi
	VMOVUPS Y12, (R9)(BX*1)
	VSQRTPS Y12, Y12
	VDIVPS  Y6, Y12, Y12
	VADDPS  Y7, Y12, Y12
	VMULPS  Y8, Y11, Y13
	VDIVPS  Y12, Y13, Y13
	VADDPS  Y13, Y9, Y9
	VMOVUPS Y9, (DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, CX
	JB      adamwd
	VZEROUPPER
	RET

// func sgd32AVX2(p, grads, buf *float32, n int, k *sgdK32, flags int)
// sgdK32: wd 0, mom 4, omd 8, negLR 12. flags: 1 wd, 2 momentum, 4 first, 8 nesterov.
TEXT ·sgd32AVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grads+8(FP), SI
	MOVQ buf+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ k+32(FP), AX
	MOVQ flags+40(FP), DX
	VBROADCASTSS 0(AX), Y0
	VBROADCASTSS 4(AX), Y1
	VBROADCASTSS 8(AX), Y2
	VBROADCASTSS 12(AX), Y3
	SHLQ $2, CX
	XORQ BX, BX

sgdloop:
	VMOVUPS (DI)(BX*1), Y9       // p
	VMOVUPS (SI)(BX*1), Y10      // d = g
	TESTQ   $1, DX
	JZ      sgdnowd
	VMULPS  Y0, Y9, Y11          // wd*p
	VADDPS  Y11, Y10, Y10        // d = g + wd*p

sgdnowd:
	TESTQ   $2, DX
	JZ      sgdstep
	VMOVAPS Y10, Y11             // b = d
	TESTQ   $4, DX
	JNZ     sgdstore
	VMOVUPS (R8)(BX*1), Y11
	VMULPS  Y1, Y11, Y11         // buf*mom
	VMULPS  Y2, Y10, Y12         // omd*d
	VADDPS  Y12, Y11, Y11        // b

sgdstore:
	VMOVUPS Y11, (R8)(BX*1)
	TESTQ   $8, DX
	JZ      sgdplainmom
	VMULPS  Y1, Y11, Y12         // mom*b
	VADDPS  Y12, Y10, Y10        // d = d + mom*b
	JMP     sgdstep

sgdplainmom:
	VMOVAPS Y11, Y10             // d = b

sgdstep:
	VMULPS  Y3, Y10, Y10         // negLR*d
	VADDPS  Y10, Y9, Y9          // p + negLR*d
	VMOVUPS Y9, (DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, CX
	JB      sgdloop
	VZEROUPPER
	RET

// func adam64AVX2(p, grads, m, v *float64, n int, k *adamK64, wd int)
// adamK64: wd 0, decay 8, b1 16, omb1 24, b2 32, omb2 40, bc2s 48, eps 56, negStep 64.
TEXT ·adam64AVX2(SB), NOSPLIT, $0-56
	MOVQ p+0(FP), DI
	MOVQ grads+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), AX
	MOVQ wd+48(FP), DX
	VBROADCASTSD 0(AX), Y0
	VBROADCASTSD 8(AX), Y1
	VBROADCASTSD 16(AX), Y2
	VBROADCASTSD 24(AX), Y3
	VBROADCASTSD 32(AX), Y4
	VBROADCASTSD 40(AX), Y5
	VBROADCASTSD 48(AX), Y6
	VBROADCASTSD 56(AX), Y7
	VBROADCASTSD 64(AX), Y8
	SHLQ $3, CX
	XORQ BX, BX
	TESTQ DX, DX
	JNZ adam64wd

adam64loop:
	VMOVUPD (DI)(BX*1), Y9
	VMULPD  Y1, Y9, Y9           // pi = p*decay
	VMOVUPD (SI)(BX*1), Y10      // gi = g
	VMOVUPD (R8)(BX*1), Y11
	VMULPD  Y2, Y11, Y11         // m*b1
	VMULPD  Y3, Y10, Y12         // g*omb1
	VADDPD  Y12, Y11, Y11        // mi
	VMOVUPD Y11, (R8)(BX*1)
	VMOVUPD (R9)(BX*1), Y12
	VMULPD  Y4, Y12, Y12         // v*b2
	VMULPD  Y5, Y10, Y13         // omb2*g
	VMULPD  Y10, Y13, Y13        // *g
	VADDPD  Y13, Y12, Y12        // vi
	VMOVUPD Y12, (R9)(BX*1)
	VSQRTPD Y12, Y12
	VDIVPD  Y6, Y12, Y12         // sqrt(vi)/bc2s
	VADDPD  Y7, Y12, Y12         // d = ... + eps
	VMULPD  Y8, Y11, Y13         // negStep*mi
	VDIVPD  Y12, Y13, Y13        // /d
	VADDPD  Y13, Y9, Y9          // pi + ...
	VMOVUPD Y9, (DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, CX
	JB      adam64loop
	VZEROUPPER
	RET

adam64wd:
	VMOVUPD (DI)(BX*1), Y9
	VMULPD  Y1, Y9, Y9           // pi = p*decay
	VMULPD  Y0, Y9, Y10          // wd*pi
	VMOVUPD (SI)(BX*1), Y11
	VADDPD  Y10, Y11, Y10        // gi = g + wd*pi
	VMOVUPD (R8)(BX*1), Y11
	VMULPD  Y2, Y11, Y11
	VMULPD  Y3, Y10, Y12
	VADDPD  Y12, Y11, Y11        // mi
	VMOVUPD Y11, (R8)(BX*1)
	VMOVUPD (R9)(BX*1), Y12
	VMULPD  Y4, Y12, Y12
	VMULPD  Y5, Y10, Y13
	VMULPD  Y10, Y13, Y13
	VADDPD  Y13, Y12, Y12        // vi
	VMOVUPD Y12, (R9)(BX*1)
	VSQRTPD Y12, Y12
	VDIVPD  Y6, Y12, Y12
	VADDPD  Y7, Y12, Y12
	VMULPD  Y8, Y11, Y13
	VDIVPD  Y12, Y13, Y13
	VADDPD  Y13, Y9, Y9
	VMOVUPD Y9, (DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, CX
	JB      adam64wd
	VZEROUPPER
	RET

// func sgd64AVX2(p, grads, buf *float64, n int, k *sgdK64, flags int)
// sgdK64: wd 0, mom 8, omd 16, negLR 24. flags: 1 wd, 2 momentum, 4 first, 8 nesterov.
TEXT ·sgd64AVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grads+8(FP), SI
	MOVQ buf+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ k+32(FP), AX
	MOVQ flags+40(FP), DX
	VBROADCASTSD 0(AX), Y0
	VBROADCASTSD 8(AX), Y1
	VBROADCASTSD 16(AX), Y2
	VBROADCASTSD 24(AX), Y3
	SHLQ $3, CX
	XORQ BX, BX

sgd64loop:
	VMOVUPD (DI)(BX*1), Y9       // p
	VMOVUPD (SI)(BX*1), Y10      // d = g
	TESTQ   $1, DX
	JZ      sgd64nowd
	VMULPD  Y0, Y9, Y11          // wd*p
	VADDPD  Y11, Y10, Y10        // d = g + wd*p

sgd64nowd:
	TESTQ   $2, DX
	JZ      sgd64step
	VMOVAPD Y10, Y11             // b = d
	TESTQ   $4, DX
	JNZ     sgd64store
	VMOVUPD (R8)(BX*1), Y11
	VMULPD  Y1, Y11, Y11         // buf*mom
	VMULPD  Y2, Y10, Y12         // omd*d
	VADDPD  Y12, Y11, Y11        // b

sgd64store:
	VMOVUPD Y11, (R8)(BX*1)
	TESTQ   $8, DX
	JZ      sgd64plainmom
	VMULPD  Y1, Y11, Y12         // mom*b
	VADDPD  Y12, Y10, Y10        // d = d + mom*b
	JMP     sgd64step

sgd64plainmom:
	VMOVAPD Y11, Y10             // d = b

sgd64step:
	VMULPD  Y3, Y10, Y10         // negLR*d
	VADDPD  Y10, Y9, Y9          // p + negLR*d
	VMOVUPD Y9, (DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, CX
	JB      sgd64loop
	VZEROUPPER
	RET
