//go:build !race

package blas_test

const raceBuild = false
