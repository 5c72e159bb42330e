// Package launch starts the worker processes of a training job on this
// machine and keeps them tied to their parent:
//
//   - re-exec for ddp: the calling process stays rank 0 and starts local
//     ranks 1..N-1 as copies of itself (same executable, same arguments)
//     with torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, ...,
//     MASTER_ADDR, MASTER_PORT) and a random FULGUR_TOKEN;
//   - spawn-and-collect for ddp_spawn: the calling process starts every rank,
//     waits for them, and reads the result rank 0 wrote (parameters, buffers,
//     metrics) from a file in a private temporary directory (Result);
//   - elastic restarts (RunElastic, behind "fulgur run" and ddp's self-launch
//     with FULGUR_MAX_RESTARTS): every rank a child, started again with
//     FULGUR_RESTART_COUNT when one fails, up to MaxRestarts times, with
//     fewer ranks down to MinWorld; the program resumes from its checkpoint.
//
// Children never outlive their parent by more than a bound: on Linux each
// is started with PDEATHSIG (SIGKILL) from one OS thread that stays alive
// until the children have exited, so a parent killed by any signal takes
// its workers with it; Kill and a cancelled context stop them too. With
// Config.Linger (ddp's re-exec) a rank instead gets a pipe from its parent
// and, through WatchParent, finishes its program for at most Linger after
// the parent is gone, so a rank 0 that returns first does not kill the
// others mid-write. Wait reports each rank that failed, naming it and its
// exit status, in an *ExitError whose StopSignal says when SIGINT or
// SIGTERM killed them (ranks reached by Ctrl-C before their handlers
// were set up): an interrupted job, not a failed one.
//
// The local rendezvous of all three listens on 127.0.0.1 at MASTER_PORT when
// the environment sets it (MasterPortFromEnv; a port another process holds
// is an error naming it), else at a free port (Loopback).
//
// launch owns processes only: it must not train, import trainer, or open the
// collective (strategy does, with the port and token it gets from here). It
// imports zerolog for the elastic supervisor's log and nothing of fulgur.
package launch
