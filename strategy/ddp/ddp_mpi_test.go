//go:build !mpi

package ddp

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

// Without -tags mpi, asking for the mpi backend says how to get it.
func TestMPIBackendNeedsTheTag(t *testing.T) {
	_, err := connectMPI(cluster.Env{Rank: 0, WorldSize: 2, Source: "openmpi"})
	if err == nil || !strings.Contains(err.Error(), "FULGUR_BACKEND=mpi") || !strings.Contains(err.Error(), "rebuild with -tags mpi") {
		t.Fatalf("err = %v, want the rebuild hint", err)
	}
	k, err := readKnobs(func(key string) (string, bool) {
		if key == EnvBackend {
			return "MPI", true
		}
		return "", false
	})
	if err != nil || k.backend != "mpi" {
		t.Fatalf("readKnobs(FULGUR_BACKEND=MPI) = %+v, %v", k, err)
	}
}
