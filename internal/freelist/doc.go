// Package freelist holds values between calls for the kernels (nn/ops) and
// the BLAS bindings (blas), like a sync.Pool that a garbage collection does
// not empty. It imports only the standard library.
package freelist
