//go:build !cuda

package strategy

const cudaBuilt = false
