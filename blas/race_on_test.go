//go:build race

package blas_test

// raceBuild: under the race detector sync.Pool drops values at random (a
// quarter of Puts), purego's among them, so a count of allocations says
// nothing of blas' own.
const raceBuild = true
