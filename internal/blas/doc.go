// Package blas is fulgur's seam for dense matrix multiply. Kernels in nn call
// Sgemm and Dgemm here; which implementation runs them is chosen once, at
// program start, with Use (the default is gonum's pure-Go BLAS, so the CPU
// path builds and runs with CGO_ENABLED=0). An implementation loaded at run
// time (OpenBLAS through purego, for instance) plugs in by satisfying Impl.
//
// Matrices are row-major, as in gonum's blas packages: element (i, j) of an
// m×k matrix a with leading dimension lda is a[i*lda+j].
//
// blas must not import anything of fulgur; it holds one process-wide choice,
// set before the first multiply and never swapped afterwards.
package blas
