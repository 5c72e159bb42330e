//go:build race

package tcp_test

// raceBuild: the race detector allocates on its own, so allocation counts
// mean nothing in this build.
const raceBuild = true
