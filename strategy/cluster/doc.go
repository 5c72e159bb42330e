// Package cluster says where this process sits in a job: its rank, local
// rank, world size, node rank and the address of rank 0, read from the
// variables a launcher sets. It reads them only through a lookup function
// (os.LookupEnv in production via OSLookup, a map in tests), opens no socket
// and must not import any collective backend, trainer or strategy.
// LauncherCPUs and SharingRanks say how many of a node's ranks share this
// process's cores: all of them, unless the launcher bound each to cores of
// its own.
//
// # Detection order
//
// Detect tries, in this order, and returns the first that matches:
//
//  1. torchrun-style: RANK, WORLD_SIZE and LOCAL_RANK all set (torchrun,
//     torch.distributed.launch, strategy/launch's re-exec). An explicit
//     per-process launcher wins over the scheduler that started it.
//  2. Kubeflow PyTorchJob: KUBERNETES_PORT, MASTER_ADDR, MASTER_PORT,
//     WORLD_SIZE and RANK set (one process per pod).
//  3. Open MPI: OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE set (mpirun).
//  4. SLURM: SLURM_PROCID and SLURM_NTASKS set (srun), unless
//     SLURM_JOB_NAME is "bash" or "interactive": as Lightning decides, that
//     is the shell of an interactive allocation (srun --pty bash, salloc),
//     whose programs launch their own ranks.
//
// With none of them it reports found == false and a single-process Env,
// unless WORLD_SIZE is above 1: then RANK or LOCAL_RANK is missing, and
// Detect returns an error naming it rather than a process that would run
// a job of its own.
// Where a launcher does not give the main address, MASTER_ADDR and
// MASTER_PORT are used when set; SLURM falls back to the first host of
// SLURM_JOB_NODELIST and port 10000 + SLURM_JOB_ID % 20000, and an Open MPI
// job whose ranks are all on one host to 127.0.0.1 and port 10000 + its job
// id (OMPI_MCA_ess_base_jobid) % 20000.
//
// Every value is validated: numbers must parse, 0 <= Rank < WorldSize,
// 0 <= LocalRank < LocalWorldSize <= WorldSize, 0 <= NodeRank < NumNodes,
// MasterPort in 1..65535.
package cluster
