//go:build (linux || darwin || freebsd) && (amd64 || arm64)

package blas

import "github.com/ebitengine/purego"

// CallLibraryForTest makes one call into the library that holds nothing of
// blas' own (its thread count): purego.SyscallN keeps its argument block in
// a sync.Pool of its own, which the first call after a GC refills, so a
// test of blas' allocations after a GC makes this call first.
func (o *Native) CallLibraryForTest() { purego.SyscallN(o.getThr) }
