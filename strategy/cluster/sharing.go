package cluster

// SharingRanks is how many of a node's localRanks share the cores of this
// process's affinity mask, cpus of them (runtime.NumCPU). Ranks that
// inherit their launcher's mask (torchrun, fulgur run, a launcher under
// taskset) all share it; a launcher that binds each rank to a part of its
// own mask, launcherCPUs of them (LauncherCPUs), spreads the ranks over its
// cores, so localRanks × cpus / launcherCPUs of them (rounded up, at least
// 1) share this part. launcherCPUs 0 (unknown) or no wider than cpus: all
// of them.
func SharingRanks(localRanks, cpus, launcherCPUs int) int {
	if localRanks < 1 {
		return 1
	}
	if cpus < 1 || launcherCPUs <= cpus {
		return localRanks
	}
	return min(localRanks, max(1, (localRanks*cpus+launcherCPUs-1)/launcherCPUs))
}
