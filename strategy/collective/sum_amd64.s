//go:build amd64 && !purego

#include "textflag.h"

// dst[i] = a[i] + b[i], 32 float32 (or 16 float64) a loop with AVX2: the
// same IEEE additions as the Go loop, so the same bits. n is a multiple of
// 32 (16).

// func add32AVX2(dst, a, b *float32, n int)
TEXT ·add32AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	SHLQ $2, CX
	XORQ BX, BX

loop32:
	CMPQ BX, CX
	JGE  done32
	VMOVUPS 0(SI)(BX*1), Y0
	VMOVUPS 32(SI)(BX*1), Y1
	VMOVUPS 64(SI)(BX*1), Y2
	VMOVUPS 96(SI)(BX*1), Y3
	VADDPS  0(DX)(BX*1), Y0, Y0
	VADDPS  32(DX)(BX*1), Y1, Y1
	VADDPS  64(DX)(BX*1), Y2, Y2
	VADDPS  96(DX)(BX*1), Y3, Y3
	VMOVUPS Y0, 0(DI)(BX*1)
	VMOVUPS Y1, 32(DI)(BX*1)
	VMOVUPS Y2, 64(DI)(BX*1)
	VMOVUPS Y3, 96(DI)(BX*1)
	ADDQ $128, BX
	JMP  loop32

done32:
	VZEROUPPER
	RET

// func add64AVX2(dst, a, b *float64, n int)
TEXT ·add64AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	SHLQ $3, CX
	XORQ BX, BX

loop64:
	CMPQ BX, CX
	JGE  done64
	VMOVUPD 0(SI)(BX*1), Y0
	VMOVUPD 32(SI)(BX*1), Y1
	VMOVUPD 64(SI)(BX*1), Y2
	VMOVUPD 96(SI)(BX*1), Y3
	VADDPD  0(DX)(BX*1), Y0, Y0
	VADDPD  32(DX)(BX*1), Y1, Y1
	VADDPD  64(DX)(BX*1), Y2, Y2
	VADDPD  96(DX)(BX*1), Y3, Y3
	VMOVUPD Y0, 0(DI)(BX*1)
	VMOVUPD Y1, 32(DI)(BX*1)
	VMOVUPD Y2, 64(DI)(BX*1)
	VMOVUPD Y3, 96(DI)(BX*1)
	ADDQ $128, BX
	JMP  loop64

done64:
	VZEROUPPER
	RET

// buf[i] = buf[i] / d, 32 float32 (or 16 float64) a loop with AVX2: one
// IEEE division per element, as the Go loop does, so the same bits. n is a
// multiple of 32 (16).

// func div32AVX2(buf *float32, d float32, n int)
TEXT ·div32AVX2(SB), NOSPLIT, $0-24
	MOVQ         buf+0(FP), DI
	VBROADCASTSS d+8(FP), Y4
	MOVQ         n+16(FP), CX
	SHLQ         $2, CX
	XORQ         BX, BX

dloop32:
	CMPQ    BX, CX
	JGE     ddone32
	VMOVUPS 0(DI)(BX*1), Y0
	VMOVUPS 32(DI)(BX*1), Y1
	VMOVUPS 64(DI)(BX*1), Y2
	VMOVUPS 96(DI)(BX*1), Y3
	VDIVPS  Y4, Y0, Y0
	VDIVPS  Y4, Y1, Y1
	VDIVPS  Y4, Y2, Y2
	VDIVPS  Y4, Y3, Y3
	VMOVUPS Y0, 0(DI)(BX*1)
	VMOVUPS Y1, 32(DI)(BX*1)
	VMOVUPS Y2, 64(DI)(BX*1)
	VMOVUPS Y3, 96(DI)(BX*1)
	ADDQ    $128, BX
	JMP     dloop32

ddone32:
	VZEROUPPER
	RET

// func div64AVX2(buf *float64, d float64, n int)
TEXT ·div64AVX2(SB), NOSPLIT, $0-24
	MOVQ         buf+0(FP), DI
	VBROADCASTSD d+8(FP), Y4
	MOVQ         n+16(FP), CX
	SHLQ         $3, CX
	XORQ         BX, BX

dloop64:
	CMPQ    BX, CX
	JGE     ddone64
	VMOVUPD 0(DI)(BX*1), Y0
	VMOVUPD 32(DI)(BX*1), Y1
	VMOVUPD 64(DI)(BX*1), Y2
	VMOVUPD 96(DI)(BX*1), Y3
	VDIVPD  Y4, Y0, Y0
	VDIVPD  Y4, Y1, Y1
	VDIVPD  Y4, Y2, Y2
	VDIVPD  Y4, Y3, Y3
	VMOVUPD Y0, 0(DI)(BX*1)
	VMOVUPD Y1, 32(DI)(BX*1)
	VMOVUPD Y2, 64(DI)(BX*1)
	VMOVUPD Y3, 96(DI)(BX*1)
	ADDQ    $128, BX
	JMP     dloop64

ddone64:
	VZEROUPPER
	RET
