//go:build amd64 && !purego

#include "textflag.h"

// func permRows32(dst *float32, ldd int, a, b *float32, lds, rows int, p *permPlan)
//
// For r < rows: the 32-lane table t (lanes 0-15 from a + r·lds under mask
// p.ka, 16-31 from b + r·lds under p.kb, unloaded lanes 0) permuted by
// p.idx: out[l] = t[p.idx[l]] where bit l of p.kz is set, else 0; lanes l
// with bit l of p.ks set are stored at dst + r·ldd + l. Nothing else is read
// or written.
TEXT ·permRows32(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	SHLQ $2, R8
	MOVQ a+16(FP), SI
	MOVQ b+24(FP), DX
	MOVQ lds+32(FP), R9
	SHLQ $2, R9
	MOVQ rows+40(FP), CX
	MOVQ p+48(FP), AX
	TESTQ CX, CX
	JZ   prdone
	VMOVDQU32 0(AX), Z4
	VMOVDQU32 64(AX), Z5
	MOVL  128(AX), BX
	KMOVW BX, K1
	MOVL  132(AX), BX
	KMOVW BX, K2
	MOVL  136(AX), BX
	KMOVW BX, K3
	SHRL  $16, BX
	KMOVW BX, K4
	MOVL  140(AX), BX
	KMOVW BX, K5
	SHRL  $16, BX
	KMOVW BX, K6

prloop:
	VMOVUPS.Z   (SI), K1, Z0
	VMOVUPS.Z   (DX), K2, Z1
	VMOVAPS     Z0, Z2
	VPERMT2PS.Z Z1, Z4, K3, Z2
	VMOVAPS     Z0, Z3
	VPERMT2PS.Z Z1, Z5, K4, Z3
	VMOVUPS     Z2, K5, (DI)
	VMOVUPS     Z3, K6, 64(DI)
	ADDQ R9, SI
	ADDQ R9, DX
	ADDQ R8, DI
	DECQ CX
	JNZ  prloop

prdone:
	VZEROUPPER
	RET
