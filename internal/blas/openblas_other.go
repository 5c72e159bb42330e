//go:build !((linux || darwin || freebsd) && (amd64 || arm64))

package blas

import "fmt"

// OpenBLAS is unavailable on this platform: purego cannot call C here
// without cgo. LoadOpenBLAS always fails and gonum runs every multiply.
type OpenBLAS struct{ Impl }

// LoadOpenBLAS reports that this platform cannot load OpenBLAS.
func LoadOpenBLAS() (*OpenBLAS, error) {
	return nil, fmt.Errorf("%w: loading it at run time is not supported on this platform", ErrNoOpenBLAS)
}

// ErrNoOpenBLAS says the library could not be found.
var ErrNoOpenBLAS = fmt.Errorf("blas: OpenBLAS not available")

// SetThreads is never reached: no OpenBLAS value exists on this platform.
func (o *OpenBLAS) SetThreads(n int) error { return ErrNoOpenBLAS }

// Threads is never reached.
func (o *OpenBLAS) Threads() int { return 1 }
