//go:build !((linux || darwin || freebsd) && (amd64 || arm64))

package blas

import "fmt"

// Native is unavailable on this platform: purego cannot call C here without
// cgo. LoadOpenBLAS and LoadBLIS always fail and gonum runs every multiply.
type Native struct{ Impl }

// LoadOpenBLAS reports that this platform cannot load OpenBLAS.
func LoadOpenBLAS() (*Native, error) {
	return nil, fmt.Errorf("%w: loading it at run time is not supported on this platform", ErrNoOpenBLAS)
}

// LoadBLIS reports that this platform cannot load BLIS.
func LoadBLIS() (*Native, error) {
	return nil, fmt.Errorf("%w: loading it at run time is not supported on this platform", ErrNoBLIS)
}

// ErrNoOpenBLAS says OpenBLAS could not be found.
var ErrNoOpenBLAS = fmt.Errorf("blas: OpenBLAS not available")

// ErrNoBLIS says BLIS could not be found.
var ErrNoBLIS = fmt.Errorf("blas: BLIS not available")

// ErrSlowBLIS says BLIS found no optimised kernels for this processor.
var ErrSlowBLIS = fmt.Errorf("blas: BLIS would run its generic reference kernels here")

// Kind is never reached: no Native value exists on this platform.
func (o *Native) Kind() string { return "" }

// SetThreads is never reached.
func (o *Native) SetThreads(n int) error { return ErrNoOpenBLAS }

// Threaded is never reached.
func (o *Native) Threaded() bool { return false }

// Threads is never reached.
func (o *Native) Threads() int { return 1 }
