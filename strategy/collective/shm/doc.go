// Package shm is the same-host collective backend: ranks that are separate
// processes on one machine exchange data through a shared-memory file in
// /dev/shm mapped by every rank (golang.org/x/sys/unix), synchronising with
// per-rank counters in that memory (spin, then yield, then short sleeps in
// the kernel, or in Go's scheduler while other goroutines want the P; no
// futexes, no syscalls on the fast path). A waiting rank publishes its core:
// it yields at once to a rank that last ran on the same core (they take
// turns on it), and spins up to 100 µs for one on another core when the host
// has a core for each rank.
//
// Start-up goes through strategy/collective/rendezvous (token checked): rank
// 0 creates the file, sends its name to the others, and removes the name once
// every rank has mapped it, so nothing is left behind even if a process is
// killed. Auto picks shared memory when every rank reports the same host
// identity and can map the file, and the fallback it is given otherwise
// (tcp.NewGroup: the TCP ring), so a launcher can always call Auto.
//
// Data moves in rounds of 1 MiB slots (SlotBytes): every rank copies its
// part in, each rank reduces its own block of the round across all slots in
// rank order (so results do not depend on timing), and every rank copies the
// result out; two counter barriers per round. An all-reduce over 2 ranks, or
// of at most 256 KiB, takes a one-barrier path instead: each rank copies its
// part into its slot and, after one barrier, reduces every slot in rank order
// into its own buffer, in half-slot rounds that alternate halves so that a
// round's writes never meet the previous round's reads. One barrier per
// operation instead of three for small messages, no result slot, and for 2
// ranks 5 buffer lengths read and written per rank against 5.5; the price is
// n buffer reads per rank instead of one, which is why 3 or more ranks keep
// the blocked path above 256 KiB. Two ranks with at most half a slot (512
// KiB) share the work instead. On cores of their own (each publishes the
// core it runs on), from 64 KiB, and unless a rank's only P served other
// goroutines in a recent wait (a training's backward pass beside the
// reduction), each copies in only the half of its buffer
// the other reduces, reduces its own half into its buffer and its slot, and
// after a second barrier copies the other half of the result out: 4 buffer
// lengths a rank instead of 5, at the same time on both cores (17 against
// 36 µs for 256 KiB between two bound threads on a 2-core Zen 3). When they
// take turns on one core and one comes first, the later rank reduces both
// parts and publishes the result, which the first copies out (one copy in,
// one reduction, one copy out between them instead of two of each). Every
// path reduces in rank order, so they give the same bits.
//
// Faults: the rendezvous connections stay open as liveness links (rank 0 to
// each rank); when one ends, the survivor marks that rank dead in shared
// memory and every waiting rank fails naming it. A silent rank is named by
// the counter that stopped advancing once Timeout passes. Linux only; on
// other systems New reports that shared memory is unavailable and Auto falls
// back. It must not import another backend (tcp, nccl, mpi, inproc), trainer
// or strategy.
package shm
