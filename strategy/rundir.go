package strategy

import (
	"os"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// LaunchedRunDir is the run directory that the process which started this
// one as a rank of its job chose for it (ddp's self-launch: where the ranks'
// rank_N.log go), or "" in a process nothing launched. The trainer's
// VersionDir returns it, so that each rank's run of the same program names
// rank 0's directory rather than the next version.
func LaunchedRunDir() string {
	if os.Getenv(launch.EnvLauncher) == "" {
		return ""
	}
	return os.Getenv(launch.EnvRunDir)
}
