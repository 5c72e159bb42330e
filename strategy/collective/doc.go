// Package collective defines how ranks of a training job talk to each other:
// the Collective interface (AllReduce, Broadcast, AllGather, ReduceScatter,
// Barrier), its asynchronous form, the errors every backend reports, and the
// small helpers backends share (buffer views, block layout, reduction kernels,
// per-operation headers).
//
// # The interface
//
//	type Collective interface {
//	    Rank() int
//	    Size() int
//	    AllReduce(ctx context.Context, buf any, op Op) error
//	    Broadcast(ctx context.Context, buf any, root int) error
//	    AllGather(ctx context.Context, send, recv any) error
//	    ReduceScatter(ctx context.Context, send, recv any, op Op) error
//	    Barrier(ctx context.Context) error
//	    Close() error
//	}
//	type Async interface {
//	    AllReduceAsync(ctx context.Context, buf any, op Op) Handle
//	    AllGatherAsync(ctx context.Context, send, recv any) Handle
//	    ReduceScatterAsync(ctx context.Context, send, recv any, op Op) Handle
//	}
//	type Handle interface{ Wait() error }
//
// Buffers are []float32 or []float64 and are used in place. Every rank of a
// group must call the same operations in the same order with the same dtype
// and length; a backend compares a small header (operation, dtype, length,
// reduce op, root, sequence number) across ranks and reports a mismatch as an
// error wrapping ErrMismatch rather than combining unrelated buffers.
//
// # Block layout (uneven lengths)
//
// ReduceScatter and AllGather cut a buffer of n elements into Size blocks with
// Counts(n, Size): the first n%Size ranks get n/Size+1 elements, the others
// n/Size. Block r starts at Offset(n, Size, r).
//
//   - ReduceScatter(send, recv): len(recv) must be Counts(len(send), Size)[Rank];
//     recv receives block Rank of the reduction. When len(send) is divisible by
//     Size this is the usual len(send) == Size*len(recv).
//   - AllGather(send, recv): len(send) must be Counts(len(recv), Size)[Rank];
//     block r of recv receives rank r's send. With equal blocks this is
//     len(recv) == Size*len(send).
//
// So a sharded strategy can reduce-scatter a gradient of any length and
// all-gather the updated shards back with the same two buffers, no padding.
//
// # Order, async and the communication goroutine
//
// WithAsync wraps any Collective so that its operations, synchronous or not,
// run one at a time in submission order (queued ones on one goroutine per
// group member); that keeps the order of operations identical on every rank
// as long as each rank submits in the same order. Every backend in this module returns values already wrapped,
// so c.(collective.Async) always succeeds for them.
//
// # Sub-groups
//
// A group splits into sub-groups as MPI_Comm_split and
// torch.distributed.new_group do (hybrid sharding: shard within a node,
// replicate across nodes). Every backend's value implements Splitter:
//
//	type Splitter interface {
//	    Split(ctx context.Context, color, key int) (Collective, error)
//	}
//
// Every rank of the group calls Split in the same place of its sequence of
// operations; the ranks passing one color form a sub-group, ordered by key
// then rank. NewGroups(ctx, c, [][]int{{0, 1}, {2, 3}}) does it by rank
// lists (a rank's new rank is its place in its list) and Subgroup by one
// list. A rank in no sub-group (color NoGroup, or in no list) gets an error
// wrapping ErrNotMember. The ranks compare their inputs before anything
// else: a rank named twice or outside the group, lists that differ between
// ranks (order included) or a bad color are an error on every rank, naming
// the value, and the group stays usable.
//
// A sub-group has connections of its own (tcp, shm and nccl meet anew
// through rendezvous.Split, the leader's address sent over the parent; mpi
// calls MPI_Comm_split; inproc shares a new group in process), so its
// operations run independently of the parent's and its siblings', at the
// same time from other goroutines, and it has its own Close. Its errors
// name global ranks: Error.Self and Error.Peer are ranks of the first
// group split, Error.Group the sub-group's members, and Members(c) lists
// them. Backends implement Split with SplitWith.
//
// # Faults
//
// A peer that dies, closes, or sends nothing for the backend's timeout
// (default DefaultTimeout, configurable per backend) turns into an error on
// every other rank, of type *Error, naming the peer and the operation; use
// errors.Is with ErrPeerLost, ErrTimeout, ErrMismatch or ErrClosed, and
// errors.As to read the *Error. After an error a group is broken: every later
// call returns an error; build a new group to continue.
//
// # Backends
//
// inproc (goroutines, bitwise reproducible, fault injection), tcp (ring over
// TCP), shm (same host, shared memory), mpi (build tag mpi, cgo, Open MPI)
// and nccl (libnccl loaded at run time). tcp, shm and nccl meet through the
// shared, token-checked rendezvous package; backends never import each
// other. hier composes groups built by others into a two-level one (shared
// memory inside a node, the network across) for jobs of several ranks on
// each of several nodes; strategy/ddp builds it for FULGUR_BACKEND=hier.
//
// This package owns no policy: it must not decide who is rank 0 or read the
// environment (strategy/cluster does), and must not import trainer, strategy
// or strategy/launch.
package collective
