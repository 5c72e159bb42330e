//go:build race

package ops

// raceBuild: the race detector allocates on its own (and, with the
// runtime's sudog caches it clears, a split that blocks may allocate a
// waiter now and then), so allocation counts mean nothing in this build.
const raceBuild = true
