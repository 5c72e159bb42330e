package cluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// LauncherCPUs is the number of cores in the affinity mask of the process
// that started this one, its launcher when a launcher started it
// (Cpus_allowed_list of /proc/PPID/status); 0 where it cannot be read. A
// rank whose own mask (runtime.NumCPU) is narrower was bound by its
// launcher (mpirun's --bind-to, srun's --cpu-bind, numactl): see
// SharingRanks.
func LauncherCPUs() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", os.Getppid()))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if list, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return cpuListLen(strings.TrimSpace(list))
		}
	}
	return 0
}

// cpuListLen counts the CPUs of a kernel CPU list ("0-3,8,10-11"); 0 when
// it is malformed.
func cpuListLen(list string) int {
	n := 0
	for _, r := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a {
				return 0
			}
		}
		n += z - a + 1
	}
	return n
}
