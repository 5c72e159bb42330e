// Package deploy holds the files that run fulgur programs on cluster engines
// (slurm/ for sbatch and srun, mpi/ for mpirun, k8s/ for Kubeflow's
// PyTorchJob and MPIJob and the container image, ci/ for the two-namespace
// multi-node test, netns/ for two nodes on one host from Go) and the tests
// that keep them honest.
//
// The Go part models what each launcher puts in the environment of every
// process it starts: Srun, Mpirun and PyTorchJob return one Vars per rank,
// following each launcher's documented behaviour (srun's block
// distribution, mpirun's by-slot mapping and -x exports, the Kubeflow
// training operator's MASTER_ADDR/RANK/WORLD_SIZE). The tests run the real
// sbatch and mpirun scripts against stand-in srun and mpirun commands,
// decode the manifests, build each rank's environment with these models and
// feed it to strategy/cluster.Detect, so a script or manifest that would
// start ranks that disagree about the job fails here, with no cluster.
//
// deploy may import strategy/cluster; nothing else in the module may import
// deploy.
package deploy
