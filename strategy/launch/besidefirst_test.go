package launch_test

import (
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// The ranks whose output a launcher shows on its own terminal beside their
// machine's first rank's say nothing of a stop that rank says; any other
// rank says its own.
func TestBesideFirstRank(t *testing.T) {
	for _, tc := range []struct {
		launcher, localRank string
		want                bool
	}{
		{"elastic", "1", true},
		{"ddp_spawn", "3", true},
		{"elastic", "0", false},
		{"ddp_spawn", "0", false},
		{"ddp", "1", false}, // writes rank_1.log
		{"", "1", false},    // mpirun, srun, torchrun variables by hand
	} {
		env := map[string]string{launch.EnvLauncher: tc.launcher, launch.EnvLocalRank: tc.localRank}
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		if got := launch.BesideFirstRank(lookup); got != tc.want {
			t.Errorf("%s=%q %s=%q: BesideFirstRank %v, want %v", launch.EnvLauncher, tc.launcher, launch.EnvLocalRank, tc.localRank, got, tc.want)
		}
	}
}
