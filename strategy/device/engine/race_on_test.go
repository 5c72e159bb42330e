//go:build race

package engine

// raceBuild: the race detector allocates on its own, so allocation counts
// mean nothing in this build.
const raceBuild = true
