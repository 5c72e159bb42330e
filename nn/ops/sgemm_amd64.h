// Macros of the sgemmNT4x6 kernels (sgemm_amd64.s, sgemm_avx2_amd64.s).

// Sets the six B row pointers AX, CX, DX, R12, R13, SI to b + 4·boff[j]
// (b and boff the kernel's arguments; DI and BX scratch).
#define NTBROWS \
	MOVQ b+32(FP), SI \
	MOVQ boff+40(FP), DI \
	MOVLQSX 0(DI), AX \
	LEAQ (SI)(AX*4), AX \
	MOVLQSX 4(DI), CX \
	LEAQ (SI)(CX*4), CX \
	MOVLQSX 8(DI), DX \
	LEAQ (SI)(DX*4), DX \
	MOVLQSX 12(DI), R12 \
	LEAQ (SI)(R12*4), R12 \
	MOVLQSX 16(DI), R13 \
	LEAQ (SI)(R13*4), R13 \
	MOVLQSX 20(DI), BX \
	LEAQ (SI)(BX*4), SI

// Moves the six B row pointers on by bstride elements (DI scratch).
#define NTBNEXT \
	MOVQ bstride+88(FP), DI \
	SHLQ $2, DI \
	ADDQ DI, AX \
	ADDQ DI, CX \
	ADDQ DI, DX \
	ADDQ DI, R12 \
	ADDQ DI, R13 \
	ADDQ DI, SI
