//go:build amd64 && !purego

#include "textflag.h"

// The elementwise kernels of elem_amd64.s for CPUs with AVX2 and FMA but
// no AVX-512: 8 lanes a step, the tail through VMASKMOVPS (no element
// outside [0, n) is read or written), the same operations in the same
// order, so the same bits as the AVX-512 kernels.

// elemtail8 holds 8 all-ones lanes then 8 zeros: the 8 lanes at
// elemtail8 + 4·(8 - t) are the mask of the lanes below t.
DATA elemtail8<>+0(SB)/8, $-1
DATA elemtail8<>+8(SB)/8, $-1
DATA elemtail8<>+16(SB)/8, $-1
DATA elemtail8<>+24(SB)/8, $-1
DATA elemtail8<>+32(SB)/8, $0
DATA elemtail8<>+40(SB)/8, $0
DATA elemtail8<>+48(SB)/8, $0
DATA elemtail8<>+56(SB)/8, $0
GLOBL elemtail8<>(SB), RODATA|NOPTR, $64

// Sets Y15 to the low n%8 lanes (n in CX), or jumps to done when none
// (DX, R11 scratch).
#define TAILMASK8(done) \
	MOVQ    CX, DX \
	ANDQ    $7, DX \
	JZ      done \
	NEGQ    DX \
	LEAQ    elemtail8<>+32(SB), R11 \
	VMOVDQU (R11)(DX*4), Y15

// Sets R9 to the whole vectors of n (in CX) and BX to 0; jumps to tail when
// there are none.
#define VECS8(tail) \
	MOVQ  CX, R9 \
	SHRQ  $3, R9 \
	XORQ  BX, BX \
	TESTQ R9, R9 \
	JZ    tail

// func affine32AVX2(x, y *float32, n int, s, b float32, relu int)
TEXT ·affine32AVX2asm(SB), NOSPLIT, $0-40
	MOVQ         x+0(FP), SI
	MOVQ         y+8(FP), DI
	MOVQ         n+16(FP), CX
	VBROADCASTSS s+24(FP), Y1
	VBROADCASTSS b+28(FP), Y2
	MOVQ         relu+32(FP), R8
	VXORPS       Y3, Y3, Y3
	VECS8(afftail)

affloop:
	VMOVUPS     (SI)(BX*1), Y0
	VFMADD213PS Y2, Y1, Y0 // Y0 = Y0·Y1 + Y2
	TESTQ       R8, R8
	JZ          2(PC)
	VMAXPS      Y0, Y3, Y0
	VMOVUPS     Y0, (DI)(BX*1)
	ADDQ        $32, BX
	DECQ        R9
	JNZ         affloop

afftail:
	TAILMASK8(affdone)
	VMASKMOVPS  (SI)(BX*1), Y15, Y0
	VFMADD213PS Y2, Y1, Y0
	TESTQ       R8, R8
	JZ          2(PC)
	VMAXPS      Y0, Y3, Y0
	VMASKMOVPS  Y0, Y15, (DI)(BX*1)

affdone:
	VZEROUPPER
	RET

// func addRelu32AVX2(a, b, y *float32, n int)
TEXT ·addRelu32AVX2asm(SB), NOSPLIT, $0-32
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), R10
	MOVQ   y+16(FP), DI
	MOVQ   n+24(FP), CX
	VXORPS Y3, Y3, Y3
	VECS8(artail)

arloop:
	VMOVUPS (SI)(BX*1), Y0
	VADDPS  (R10)(BX*1), Y0, Y0
	VMAXPS  Y0, Y3, Y0
	VMOVUPS Y0, (DI)(BX*1)
	ADDQ    $32, BX
	DECQ    R9
	JNZ     arloop

artail:
	TAILMASK8(ardone)
	VMASKMOVPS (SI)(BX*1), Y15, Y0
	VMASKMOVPS (R10)(BX*1), Y15, Y1
	VADDPS     Y1, Y0, Y0
	VMAXPS     Y0, Y3, Y0
	VMASKMOVPS Y0, Y15, (DI)(BX*1)

ardone:
	VZEROUPPER
	RET

// func relu32AVX2(x, y *float32, n int)
// y = max(x + 0, 0): adding +0 turns -0 into +0 and keeps NaN, and
// VMAXPS returns its second operand (x + 0) for NaN and for equal zeros,
// so every element is Go's max(x, 0), bit for bit (addRelu32AVX2 with b
// all +0).
TEXT ·relu32AVX2asm(SB), NOSPLIT, $0-24
	MOVQ   x+0(FP), SI
	MOVQ   y+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y3, Y3, Y3
	VECS8(rltail)

rlloop:
	VMOVUPS (SI)(BX*1), Y0
	VADDPS  Y3, Y0, Y0
	VMAXPS  Y0, Y3, Y0
	VMOVUPS Y0, (DI)(BX*1)
	ADDQ    $32, BX
	DECQ    R9
	JNZ     rlloop

rltail:
	TAILMASK8(rldone)
	VMASKMOVPS (SI)(BX*1), Y15, Y0
	VADDPS     Y3, Y0, Y0
	VMAXPS     Y0, Y3, Y0
	VMASKMOVPS Y0, Y15, (DI)(BX*1)

rldone:
	VZEROUPPER
	RET

// func add32AVX2(a, b, y *float32, n int)
TEXT ·add32AVX2asm(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), R10
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	VECS8(adtail)

adloop:
	VMOVUPS (SI)(BX*1), Y0
	VADDPS  (R10)(BX*1), Y0, Y0
	VMOVUPS Y0, (DI)(BX*1)
	ADDQ    $32, BX
	DECQ    R9
	JNZ     adloop

adtail:
	TAILMASK8(addone)
	VMASKMOVPS (SI)(BX*1), Y15, Y0
	VMASKMOVPS (R10)(BX*1), Y15, Y1
	VADDPS     Y1, Y0, Y0
	VMASKMOVPS Y0, Y15, (DI)(BX*1)

addone:
	VZEROUPPER
	RET

// func maskPos32AVX2(y, dy, dx *float32, n int)
// dx[i] = dy[i] where y[i] is not ≤ 0 (positive or NaN), else +0.
TEXT ·maskPos32AVX2asm(SB), NOSPLIT, $0-32
	MOVQ   y+0(FP), SI
	MOVQ   dy+8(FP), R10
	MOVQ   dx+16(FP), DI
	MOVQ   n+24(FP), CX
	VXORPS Y3, Y3, Y3
	VECS8(mptail)

mploop:
	VMOVUPS (SI)(BX*1), Y0
	VCMPPS  $0x16, Y3, Y0, Y2 // NLE_UQ: not (y ≤ 0)
	VANDPS  (R10)(BX*1), Y2, Y1
	VMOVUPS Y1, (DI)(BX*1)
	ADDQ    $32, BX
	DECQ    R9
	JNZ     mploop

mptail:
	TAILMASK8(mpdone)
	VMASKMOVPS (SI)(BX*1), Y15, Y0
	VCMPPS     $0x16, Y3, Y0, Y2
	VMASKMOVPS (R10)(BX*1), Y15, Y1
	VANDPS     Y1, Y2, Y1
	VMASKMOVPS Y1, Y15, (DI)(BX*1)

mpdone:
	VZEROUPPER
	RET

// func lincomb32AVX2(d, x, out *float32, n int, a, b, k float32)
// out[i] = a·d[i] + b·x[i] + k.
TEXT ·lincomb32AVX2asm(SB), NOSPLIT, $0-44
	MOVQ         d+0(FP), SI
	MOVQ         x+8(FP), R10
	MOVQ         out+16(FP), DI
	MOVQ         n+24(FP), CX
	VBROADCASTSS a+32(FP), Y4
	VBROADCASTSS b+36(FP), Y5
	VBROADCASTSS k+40(FP), Y6
	VECS8(lctail)

lcloop:
	VMOVUPS     (R10)(BX*1), Y0
	VMULPS      Y5, Y0, Y0
	VMOVUPS     (SI)(BX*1), Y1
	VFMADD231PS Y4, Y1, Y0 // Y0 += d·a
	VADDPS      Y6, Y0, Y0
	VMOVUPS     Y0, (DI)(BX*1)
	ADDQ        $32, BX
	DECQ        R9
	JNZ         lcloop

lctail:
	TAILMASK8(lcdone)
	VMASKMOVPS  (R10)(BX*1), Y15, Y0
	VMULPS      Y5, Y0, Y0
	VMASKMOVPS  (SI)(BX*1), Y15, Y1
	VFMADD231PS Y4, Y1, Y0
	VADDPS      Y6, Y0, Y0
	VMASKMOVPS  Y0, Y15, (DI)(BX*1)

lcdone:
	VZEROUPPER
	RET

// func bnAddRelu32AVX2(x1, x2, y *float32, n int, a, b, k float32)
// y[i] = max(a·x1[i] + (b·x2[i] + k), 0), NaN passing through as Go's max.
TEXT ·bnAddRelu32AVX2asm(SB), NOSPLIT, $0-44
	MOVQ         x1+0(FP), SI
	MOVQ         x2+8(FP), R10
	MOVQ         y+16(FP), DI
	MOVQ         n+24(FP), CX
	VBROADCASTSS a+32(FP), Y4
	VBROADCASTSS b+36(FP), Y5
	VBROADCASTSS k+40(FP), Y6
	VXORPS       Y3, Y3, Y3
	VECS8(batail)

baloop:
	VMOVUPS     (R10)(BX*1), Y0
	VFMADD213PS Y6, Y5, Y0         // Y0 = x2·b + k
	VFMADD231PS (SI)(BX*1), Y4, Y0 // Y0 += x1·a
	VMAXPS      Y0, Y3, Y0
	VMOVUPS     Y0, (DI)(BX*1)
	ADDQ        $32, BX
	DECQ        R9
	JNZ         baloop

batail:
	TAILMASK8(badone)
	VMASKMOVPS  (R10)(BX*1), Y15, Y0
	VMASKMOVPS  (SI)(BX*1), Y15, Y1
	VFMADD213PS Y6, Y5, Y0
	VFMADD231PS Y1, Y4, Y0
	VMAXPS      Y0, Y3, Y0
	VMASKMOVPS  Y0, Y15, (DI)(BX*1)

badone:
	VZEROUPPER
	RET

// Sums the 8 lanes of y (x its low half) into the float at dst (fixed tree
// order; X5 scratch).
#define HSUM8(y, x, dst) \
	VEXTRACTF128 $1, y, X5 \
	VADDPS       X5, x, x \
	VPERMILPS    $0x4E, x, X5 \
	VADDPS       X5, x, x \
	VPERMILPS    $0xB1, x, X5 \
	VADDSS       X5, x, x \
	VMOVSS       x, dst

// Adds the accumulators Y1 into Y0 and Y3 into Y2 and stores their sums.
#define SUMS2(s0, s2) \
	VADDPS Y1, Y0, Y0 \
	VADDPS Y3, Y2, Y2 \
	HSUM8(Y0, X0, s0) \
	HSUM8(Y2, X2, s2)

// Zeroes the accumulators Y0-Y3 and sets R9 to the 16-element steps of n
// (in CX), BX to 0; jumps to half when there are none.
#define SUMSTART(half) \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	MOVQ   CX, R9 \
	SHRQ   $4, R9 \
	XORQ   BX, BX \
	TESTQ  R9, R9 \
	JZ     half

// func shiftedSums32AVX2(x *float32, n int, k float32) (s, sq float32)
// Σ(x-k) and Σ(x-k)², in two 8-lane accumulators each: shiftedSums32's
// sums in another order.
TEXT ·shiftedSums32AVX2asm(SB), NOSPLIT, $0-32
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS k+16(FP), Y4
	SUMSTART(sshalf)

ssloop:
	VMOVUPS     (SI)(BX*1), Y5
	VMOVUPS     32(SI)(BX*1), Y6
	VSUBPS      Y4, Y5, Y5
	VSUBPS      Y4, Y6, Y6
	VADDPS      Y5, Y0, Y0
	VADDPS      Y6, Y1, Y1
	VFMADD231PS Y5, Y5, Y2
	VFMADD231PS Y6, Y6, Y3
	ADDQ        $64, BX
	DECQ        R9
	JNZ         ssloop

sshalf:
	TESTQ       $8, CX
	JZ          sstail
	VMOVUPS     (SI)(BX*1), Y5
	VSUBPS      Y4, Y5, Y5
	VADDPS      Y5, Y0, Y0
	VFMADD231PS Y5, Y5, Y2
	ADDQ        $32, BX

sstail:
	TAILMASK8(ssdone)
	VMASKMOVPS  (SI)(BX*1), Y15, Y5
	VSUBPS      Y4, Y5, Y5
	VANDPS      Y15, Y5, Y5 // the lanes past n add nothing
	VADDPS      Y5, Y1, Y1
	VFMADD231PS Y5, Y5, Y3

ssdone:
	SUMS2(s+24(FP), sq+28(FP))
	VZEROUPPER
	RET

// func dotSums32AVX2(d, x *float32, n int) (s, sx float32)
// Σd and Σd·x, in two 8-lane accumulators each: dotSums32's sums in
// another order.
TEXT ·dotSums32AVX2asm(SB), NOSPLIT, $0-32
	MOVQ   d+0(FP), SI
	MOVQ   x+8(FP), R10
	MOVQ   n+16(FP), CX
	SUMSTART(dshalf)

dsloop:
	VMOVUPS     (SI)(BX*1), Y5
	VMOVUPS     32(SI)(BX*1), Y6
	VADDPS      Y5, Y0, Y0
	VADDPS      Y6, Y1, Y1
	VFMADD231PS (R10)(BX*1), Y5, Y2
	VFMADD231PS 32(R10)(BX*1), Y6, Y3
	ADDQ        $64, BX
	DECQ        R9
	JNZ         dsloop

dshalf:
	TESTQ       $8, CX
	JZ          dstail
	VMOVUPS     (SI)(BX*1), Y5
	VADDPS      Y5, Y0, Y0
	VFMADD231PS (R10)(BX*1), Y5, Y2
	ADDQ        $32, BX

dstail:
	TAILMASK8(dsdone)
	VMASKMOVPS  (SI)(BX*1), Y15, Y5
	VMASKMOVPS  (R10)(BX*1), Y15, Y6
	VADDPS      Y5, Y1, Y1
	VFMADD231PS Y6, Y5, Y3

dsdone:
	SUMS2(s+24(FP), sx+28(FP))
	VZEROUPPER
	RET

// func copyRowsAVX2(dst *float32, ldd int, src *float32, lds int, w, gap, rows int)
//
// copyRows32 without mask registers: each row's w values in 8-, 4-, 2- and
// 1-float moves, then its gap zeros the same way. No VMASKMOVPS: nothing
// outside the rows is read or written, and no masked store (which costs
// Zen 3 several times a plain one) is taken.
TEXT ·copyRowsAVX2(SB), NOSPLIT, $0-56
	MOVQ   dst+0(FP), DI
	MOVQ   ldd+8(FP), R8
	SHLQ   $2, R8
	MOVQ   src+16(FP), SI
	MOVQ   lds+24(FP), R9
	SHLQ   $2, R9
	MOVQ   w+32(FP), AX
	MOVQ   gap+40(FP), DX
	MOVQ   rows+48(FP), CX
	TESTQ  CX, CX
	JZ     cr2done
	VXORPS Y1, Y1, Y1

cr2row:
	MOVQ SI, R10
	MOVQ DI, R11
	MOVQ AX, BX

cr2c8:
	CMPQ    BX, $8
	JLT     cr2c4
	VMOVUPS (R10), Y0
	VMOVUPS Y0, (R11)
	ADDQ    $32, R10
	ADDQ    $32, R11
	SUBQ    $8, BX
	JMP     cr2c8

cr2c4:
	CMPQ    BX, $4
	JLT     cr2c2
	VMOVUPS (R10), X0
	VMOVUPS X0, (R11)
	ADDQ    $16, R10
	ADDQ    $16, R11
	SUBQ    $4, BX

cr2c2:
	CMPQ BX, $2
	JLT  cr2c1
	MOVQ (R10), R12
	MOVQ R12, (R11)
	ADDQ $8, R10
	ADDQ $8, R11
	SUBQ $2, BX

cr2c1:
	TESTQ BX, BX
	JZ    cr2z
	MOVL  (R10), R12
	MOVL  R12, (R11)
	ADDQ  $4, R11

cr2z:
	MOVQ DX, BX

cr2z8:
	CMPQ    BX, $8
	JLT     cr2z4
	VMOVUPS Y1, (R11)
	ADDQ    $32, R11
	SUBQ    $8, BX
	JMP     cr2z8

cr2z4:
	CMPQ    BX, $4
	JLT     cr2z2
	VMOVUPS X1, (R11)
	ADDQ    $16, R11
	SUBQ    $4, BX

cr2z2:
	CMPQ BX, $2
	JLT  cr2z1
	MOVQ $0, (R11)
	ADDQ $8, R11
	SUBQ $2, BX

cr2z1:
	TESTQ BX, BX
	JZ    cr2next
	MOVL  $0, (R11)

cr2next:
	ADDQ R9, SI
	ADDQ R8, DI
	DECQ CX
	JNZ  cr2row

cr2done:
	VZEROUPPER
	RET

// func interleave2AVX2(row, e, o *float32, n int)
//
// row[2b] = e[b] and row[2b+1] = o[b] for b < n, n ≥ 4 (interleave2): 8
// pairs a step (4 while fewer than 8), the last step on the last 8 (or 4)
// pairs, overlapping the step before when n is not a multiple: it writes
// the same values again. Nothing outside the three ranges is read or
// written; row must not overlap e or o.
TEXT ·interleave2AVX2(SB), NOSPLIT, $0-32
	MOVQ row+0(FP), DI
	MOVQ e+8(FP), SI
	MOVQ o+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ BX, BX
	CMPQ CX, $8
	JLT  il4

il8:
	VMOVUPS    (SI)(BX*4), Y0
	VMOVUPS    (DX)(BX*4), Y1
	VUNPCKLPS  Y1, Y0, Y2     // e0 o0 e1 o1 | e4 o4 e5 o5
	VUNPCKHPS  Y1, Y0, Y3     // e2 o2 e3 o3 | e6 o6 e7 o7
	VPERM2F128 $0x20, Y3, Y2, Y4
	VPERM2F128 $0x31, Y3, Y2, Y5
	VMOVUPS    Y4, (DI)(BX*8)
	VMOVUPS    Y5, 32(DI)(BX*8)
	ADDQ       $8, BX
	CMPQ       BX, CX
	JEQ        ildone
	LEAQ       8(BX), AX
	CMPQ       AX, CX
	JLE        il8
	LEAQ       -8(CX), BX
	JMP        il8

il4:
	VMOVUPS   (SI)(BX*4), X0
	VMOVUPS   (DX)(BX*4), X1
	VUNPCKLPS X1, X0, X2
	VUNPCKHPS X1, X0, X3
	VMOVUPS   X2, (DI)(BX*8)
	VMOVUPS   X3, 16(DI)(BX*8)
	LEAQ      -4(CX), AX
	CMPQ      BX, AX
	JEQ       ildone
	MOVQ      AX, BX
	JMP       il4

ildone:
	VZEROUPPER
	RET

// func deinterleave2AVX2(e, o, src *float32, n int)
//
// e[j] = src[2j] and o[j] = src[2j+1] for j < n, n ≥ 4 (deinterleave2),
// in steps as interleave2AVX2's. Nothing outside the three ranges is read
// or written; src must not overlap e or o.
TEXT ·deinterleave2AVX2(SB), NOSPLIT, $0-32
	MOVQ e+0(FP), DI
	MOVQ o+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	XORQ BX, BX
	CMPQ CX, $8
	JLT  dl4

dl8:
	VMOVUPS (SI)(BX*8), Y0    // a0..a7
	VMOVUPS 32(SI)(BX*8), Y1  // b0..b7
	VSHUFPS $0x88, Y1, Y0, Y2 // a0 a2 b0 b2 | a4 a6 b4 b6
	VSHUFPS $0xDD, Y1, Y0, Y3 // a1 a3 b1 b3 | a5 a7 b5 b7
	VPERMPD $0xD8, Y2, Y2     // a0 a2 a4 a6 b0 b2 b4 b6
	VPERMPD $0xD8, Y3, Y3
	VMOVUPS Y2, (DI)(BX*4)
	VMOVUPS Y3, (DX)(BX*4)
	ADDQ    $8, BX
	CMPQ    BX, CX
	JEQ     dldone
	LEAQ    8(BX), AX
	CMPQ    AX, CX
	JLE     dl8
	LEAQ    -8(CX), BX
	JMP     dl8

dl4:
	VMOVUPS (SI)(BX*8), X0
	VMOVUPS 16(SI)(BX*8), X1
	VSHUFPS $0x88, X1, X0, X2
	VSHUFPS $0xDD, X1, X0, X3
	VMOVUPS X2, (DI)(BX*4)
	VMOVUPS X3, (DX)(BX*4)
	LEAQ    -4(CX), AX
	CMPQ    BX, AX
	JEQ     dldone
	MOVQ    AX, BX
	JMP     dl4

dldone:
	VZEROUPPER
	RET
