//go:build !linux

package cluster

// LauncherCPUs is 0 (unknown) where the launcher's affinity mask cannot be
// read: SharingRanks then takes the node's ranks to share this process's
// cores.
func LauncherCPUs() int { return 0 }
