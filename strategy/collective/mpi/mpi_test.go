//go:build mpi

package mpi_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/collectivetest"
	"github.com/fulgur-ml/fulgur/strategy/collective/mpi"
)

func TestMain(m *testing.M) {
	mpi.Timeout = 60 * time.Second // a failed rank must not stall the others for minutes
	code := m.Run()
	mpi.Finalize()
	os.Exit(code)
}

// TestConformance runs the per-rank suite on groups of 1..world ranks (run
// the test binary under mpirun -np 4 for the full range).
func TestConformance(t *testing.T) {
	world, err := mpi.New()
	if err != nil {
		t.Fatal(err)
	}
	defer world.Close()
	for n := 1; n <= world.Size(); n++ {
		g, err := mpi.Split(n)
		if err != nil {
			t.Fatal(err)
		}
		if g == nil {
			continue
		}
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) { collectivetest.RunRank(t, g) })
		g.Close()
	}
}
