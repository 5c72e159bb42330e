// Macros of the AVX-512 loop kernels (elem_amd64.s, bnadd_amd64.s).

// Sets K1 to the low n%16 lanes in DX (n in CX), or jumps to done when none.
#define TAILMASK(done) \
	MOVQ  CX, DX \
	ANDQ  $15, DX \
	JZ    done \
	MOVL  $1, R11 \
	SHLXL DX, R11, R11 \
	DECL  R11 \
	KMOVW R11, K1

// Sums the 16 lanes of z into the float at off(FP) (fixed tree order).
#define HSUM(z, y, x, dst) \
	VEXTRACTF32X8 $1, z, Y30 \
	VADDPS        Y30, y, Y30 \
	VEXTRACTF32X4 $1, Y30, X31 \
	VADDPS        X31, X30, X30 \
	VPERMILPS     $0x4E, X30, X31 \
	VADDPS        X31, X30, X30 \
	VPERMILPS     $0xB1, X30, X31 \
	VADDSS        X31, X30, X30 \
	VMOVSS        X30, dst
