package cluster_test

import (
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

func TestSharingRanks(t *testing.T) {
	for _, c := range []struct {
		what                  string
		ranks, cpus, launcher int
		want                  int
	}{
		{"ranks inherit the launcher's 16 cores", 4, 16, 16, 4},
		{"ranks inherit a launcher's taskset of 4 cores", 4, 4, 4, 4},
		{"the launcher's mask unknown", 4, 4, 0, 4},
		{"4 ranks bound to 4 of 16 cores each (mpirun --map-by slot:PE=4)", 4, 4, 16, 1},
		{"4 ranks bound to 8-core sockets of 16 (mpirun --bind-to socket)", 4, 8, 16, 2},
		{"2 ranks bound to 1 core of 16 each (mpirun --bind-to core)", 2, 1, 16, 1},
		{"4 ranks bound to 1 core of 2 (oversubscribed)", 4, 1, 2, 2},
		{"3 ranks bound to 1 core of 2", 3, 1, 2, 2},
		{"alone", 1, 1, 16, 1},
		{"no ranks given", 0, 4, 16, 1},
	} {
		if got := cluster.SharingRanks(c.ranks, c.cpus, c.launcher); got != c.want {
			t.Errorf("%s: SharingRanks(%d, %d, %d) = %d, want %d", c.what, c.ranks, c.cpus, c.launcher, got, c.want)
		}
	}
}
