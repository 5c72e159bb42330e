package ddp

import (
	"fmt"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/mpi"
)

// connectMPI joins MPI_COMM_WORLD. mpirun or srun started every rank, so no
// rendezvous or token is needed; the rank and size MPI reports must match
// what the launch environment said, or the job was started wrongly.
// Without -tags mpi, mpi.New says how to rebuild.
func connectMPI(env cluster.Env) (collective.Collective, error) {
	g, err := mpi.New()
	if err != nil {
		return nil, fmt.Errorf("%s=mpi: %w", EnvBackend, err)
	}
	if g.Rank() != env.Rank || g.Size() != env.WorldSize {
		g.Close()
		mpi.Finalize()
		return nil, fmt.Errorf("%s=mpi: MPI says rank %d of %d but the launch environment (%s) says rank %d of %d: start every rank with mpirun or srun, one per device", EnvBackend, g.Rank(), g.Size(), env.Source, env.Rank, env.WorldSize)
	}
	return finalizing{g}, nil
}

// finalizing shuts MPI down when the group closes: mpirun reports a rank
// that exits without MPI_Finalize as failed.
type finalizing struct{ collective.Group }

func (f finalizing) Close() error {
	err := f.Group.Close()
	if ferr := mpi.Finalize(); err == nil {
		err = ferr
	}
	return err
}
