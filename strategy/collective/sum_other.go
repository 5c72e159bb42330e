//go:build !amd64 || purego

package collective

// useAVX2 is false: the Go loop runs everywhere but on amd64.
var useAVX2 = false

// addVec does nothing here: the Go loop adds every element.
func addVec[T Float](dst, a, b []T) int { return 0 }

// divVec does nothing here: the Go loop divides every element.
func divVec[T Float](buf []T, d T) int { return 0 }
