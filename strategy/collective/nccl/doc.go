// Package nccl is the collective backend over NVIDIA NCCL. libnccl.so.2 and
// libcudart are loaded at run time with github.com/ebitengine/purego, so the
// package builds without CUDA headers or cgo, and on a machine without NCCL,
// New and Load return an error wrapping ErrUnavailable that says which
// library is missing and how to point at it (Config.NCCLPath, CUDARTPath).
//
// Ranks meet through strategy/collective/rendezvous (token checked): rank 0 asks NCCL for a
// unique id and hands it to the others with Rendezvous.Exchange, then every
// rank calls ncclCommInitRank on its device (Config.Device). Each Comm owns
// one CUDA stream. The collective.Collective methods take host buffers:
// they are staged into device memory, reduced by NCCL on the stream, and
// copied back; device buffers go straight through the Device* methods.
// Every operation first all-gathers a small header through NCCL so
// mismatched calls fail with collective.ErrMismatch. Completion is polled
// (cudaStreamQuery) against the context and Config.Timeout; on timeout the
// communicator is aborted. NCCL does not say which rank failed, so errors
// name no peer.
//
// NCCL's all-gather and reduce-scatter need equal blocks; uneven lengths
// (collective.Counts) are padded to the largest block on the device.
//
// Tests run against a stand-in library with the same C signatures
// (testdata/standin.c), compiled by the test with gcc. On a machine with a
// GPU, `go test -tags gpu -run GPU` runs the suite against the real NCCL
// and CUDA runtime at one rank, and checks that ranks sharing a GPU or
// given a device the host lacks fail at once on every rank (gpu_test.go;
// FULGUR_TEST_NCCL and FULGUR_TEST_CUDART name the libraries, e.g. those
// of pip's nvidia-nccl and CUDA 13). Before ncclCommInitRank, the ranks
// exchange whether each could load the libraries and set its device; the
// init itself waits at most Config.Timeout, or until the context ends. It must not import
// another backend (tcp, shm, mpi, inproc), trainer or strategy.
package nccl
