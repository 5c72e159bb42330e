//go:build mpi

package main

import (
	"context"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/mpi"
)

// Built with -tags mpi, the allreduce workload also measures the mpi
// backend, under mpirun.
func init() {
	mpiBuilt = true
	extraBackends["mpi"] = func(ctx context.Context) (collective.Group, error) { return mpi.New() }
	extraFinalize["mpi"] = mpi.Finalize
}
