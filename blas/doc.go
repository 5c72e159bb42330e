// Package blas is fulgur's seam for dense matrix multiply, and the place a
// program picks which BLAS runs it and on how many threads.
//
// Kernels in nn call Sgemm and Dgemm here. The implementation behind them is
// chosen once per process, like gonum's blas64.Use: the default is gonum's
// pure-Go BLAS, so the CPU path builds and runs with CGO_ENABLED=0; Use
// installs another before the first multiply and fails with ErrStarted after
// it, so results never depend on a swap midway. The trainer calls Choose at
// start (an implementation the program installed with Use stays; a later
// trainer whose environment asks for another, or for other counts, gets an
// error), which reads the environment:
//
//   - FULGUR_BLAS: auto (BLIS or OpenBLAS when the dynamic loader finds
//     them, loaded at run time through purego; else gonum), blis, openblas
//     or gonum;
//   - FULGUR_BLAS_THREADS: threads per multiply (default 1; the library's
//     own OMP_NUM_THREADS, OPENBLAS_NUM_THREADS or BLIS_NUM_THREADS do not
//     set it, and Choose warns, naming one set to another count);
//   - FULGUR_WORKERS: goroutines running kernels at once (default the cores
//     given to the process over the ranks on this machine).
//
// Plan (CurrentPlan, Workers, Threads) is how the process splits its cores
// between those workers and the BLAS threads. A program that wants another
// implementation calls Use before building its trainer:
//
//	if err := blas.Use(myImpl{}); err != nil { ... }
//
// Any Impl must pass blas/blastest's conformance suite.
//
// Matrices are row-major, as in gonum's blas packages: element (i, j) of an
// m×k matrix a with leading dimension lda is a[i*lda+j].
//
// blas imports strategy/cluster (the local rank count the plan divides the
// cores by) and nothing else of fulgur; it holds one process-wide choice,
// set before the first multiply and never swapped afterwards.
package blas
