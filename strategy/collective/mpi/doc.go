// Package mpi is the collective backend over MPI (Open MPI 4.1 from Debian's
// libopenmpi-dev), for clusters that already launch jobs with mpirun or srun.
// It is compiled only with the build tag mpi (cgo); without the tag New and
// Split report that the binary was built without MPI.
//
// Ranks are processes started by the launcher: New wraps a duplicate of
// MPI_COMM_WORLD, Split(n) the first n world ranks. Each operation first
// all-gathers a small header (kind, dtype, op, root, length, sequence) so
// mismatched calls fail with collective.ErrMismatch on every rank; data then
// moves with MPI's blocking collectives (MPI_Allreduce, MPI_Bcast,
// MPI_Allgatherv, MPI_Reduce_scatter, MPI_Barrier), the algorithms plain
// mpirun programs get, each called on its own goroutine so that a context or
// the timeout can end the wait. (The non-blocking collectives polled before
// progress only inside MPI_Test: with the polling backing off to sleeps, a
// 4 MB all-reduce over 2 ranks took 5.0 ms against plain Open MPI's 0.5 ms.)
// MPI cannot cancel a collective or say which rank is missing: a timed-out
// operation reports collective.ErrTimeout with no peer, breaks the group and
// leaves the call blocked in MPI (Finalize then refuses to run), and a dead
// process is handled by the launcher (mpirun kills the job and names the
// failed rank).
//
// What that costs against a plain MPI program (BenchmarkAllReduceCost,
// which runs each variant in turn from a barrier): 4 ranks on a shared
// 2-core machine (load average 3-4), Open MPI over vader, medians per
// rank. A 256 KiB float32 sum took 207-236 µs called on the caller's
// goroutine, the same after the header all-gather, 268-303 µs on a
// goroutine of its own, and 296-366 µs through this backend (both): the
// handoff to the goroutine (a second thread woken on two cores that four
// busy-polling ranks share) is most of the 0.7-0.8x of plain mpirun that
// cmd/bench shows at 4 ranks. At 4 MiB the backend was 5-10% slower than
// the plain call. Calling MPI on the caller's goroutine would lose the
// timeout: a blocked MPI call cannot be abandoned by the thread inside it.
//
// Call Finalize once, at the end of the program. Tests run with
//
//	go test -tags mpi -c -o mpi.test ./strategy/collective/mpi
//	mpirun --allow-run-as-root --oversubscribe -np 4 ./mpi.test -test.v
//
// It must not import another backend, trainer or strategy.
package mpi
