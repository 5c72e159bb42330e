// Package hier makes a two-level collective out of three groups, as NCCL's
// and Horovod's hierarchical all-reduce do for jobs of several ranks on each
// of several nodes: the ranks of a node talk over shared memory, and only
// one rank per node and block crosses the network.
//
// An all-reduce of n elements on a job of N nodes with L ranks each is a
// reduce-scatter inside the node (each local rank ends with one block of n/L
// elements, reduced over its node), an all-reduce of that block across the
// nodes among the ranks with the same local index (N ranks, one per node),
// and an all-gather inside the node. A flat ring over the NL ranks takes
// 2(NL-1) steps, each as slow as its slowest link, so each pays the
// network's latency; here only the 2(N-1) steps of the N-rank ring do. What
// a node sends across is 2(N-1)/N·n elements (n for two nodes) against a
// flat ring's 2(NL-1)/NL·n (1.5n for two nodes of two). Broadcast goes
// from the root to its node's ranks, then from each of them across the nodes.
// ReduceScatter reduces inside the node and then across the nodes, and
// AllGather gathers across the nodes and then inside the node (what sharded
// and fsdp run for every bucket and unit), with the buffer copied into (or
// out of) the order the levels hand blocks out in: by local index, then
// node. That order lines up with the flat result's blocks when ranks are
// numbered node by node, as torchrun numbers them, or the length divides by
// the job's size; otherwise, and for Barrier and Split, the flat group runs
// the operation, after a barrier in the node and one across the nodes, so
// that a rank calling one of them while others run a two-level operation
// fails with collective.ErrMismatch instead of waiting for the timeout. The
// copy costs a scratch buffer as long as the largest such operation.
//
// Shape describes the layout (which node each rank runs on, and its index
// there); a job qualifies when every node runs the same number of ranks and
// there is more than one node and more than one rank a node. New composes
// the flat group (a tcp ring: it must break every rank out of a failure,
// Breaker) with a local group (ranks of one node, built by the caller,
// typically shared memory) and a cross group (split from the flat group).
// It imports no backend: strategy/ddp builds it from tcp and shm when ranks
// run on several hosts ("auto").
//
// Results: the reduction order differs from the flat group's (node by node,
// then across nodes), and Mean sums on both levels and divides once, so a
// float32 all-reduce or reduce-scatter may differ from a flat one in the
// last bits; every rank receives the same bits.
package hier
