//go:build !linux

package blas

// launcherCPUs is 0 (unknown) where the launcher's affinity mask cannot be
// read: the local ranks are taken to share this process's cores.
func launcherCPUs() int { return 0 }
