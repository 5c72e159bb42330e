// Package tcp is the pure-Go collective backend over TCP, for ranks on one
// or many machines.
//
// Start-up (New): the ranks meet through strategy/collective/rendezvous
// (token checked by challenge-response, strangers refused and logged, the
// table of data addresses handed out), then each rank dials the next one on
// the ring and accepts the previous one with rendezvous.DialPeer and
// AcceptPeer, which prove the token both ways on the data connection too.
// NewRing builds the ring over a rendezvous the caller already holds, and
// takes it over (the ring's Close closes it); NewGroup is its
// collective.Group form (shm.Auto's fallback). With
// Config.TLS the ring's connections run over TLS 1.3 with mutual
// authentication (see rendezvous.TLS); the ring itself does not change.
//
// Operations: all-reduce is a ring reduce-scatter followed by a ring
// all-gather, both pipelined in segments (Config.SegmentBytes): a sender
// goroutine forwards each segment as soon as it has been reduced, while the
// calling goroutine receives and reduces the next (reading straight into the
// caller's buffer where a segment is copied, into one segment of scratch
// where it is reduced). An all-reduce of at most Config.SmallBytes (128 KiB;
// 4 MiB with two ranks) instead sends every rank's whole buffer round the
// ring and has each rank reduce the n buffers in rank order: n-1 steps of
// latency instead of 2(n-1), which is what small messages pay for. With two
// ranks that is one step instead of two for the same bytes sent, and it
// runs in place: each rank sends its own buffer and reduces the other's
// into it as it lands, read by read, with no copy (the ring reduces its
// received segments the same way). For Sum and Mean the result is the
// ring's to the bit (a+b is b+a, then one division). The operation header
// frame names the algorithm, so ranks that would pick differently fail
// with collective.ErrMismatch.
//
// An operation runs on the caller's goroutine, with no sender goroutine to
// wake, when its sends all fit a window (an eighth of the kernel send
// buffer) together (a barrier, a small all-reduce of any number of ranks;
// then a rank's reads send the wait frames, see Faults), or, with two
// ranks, when its sends wait for no receive (gathering whole buffers, an
// all-gather, a broadcast): each writes a send once what it waits for has
// landed and while it is at most the window ahead of what it has
// received, and reads in between, so no rank waits in a write while the
// one it writes to does too. Such an operation allocates nothing: its plan
// (which spans go and come, in what order) is kept per shape, its frames' headers
// are encoded into the ring's buffers, and a context whose cancellation
// must break the group is watched once for all the operations run on it
// (an operation with a sender goroutine still allocates its goroutine,
// channels and ticker). Broadcast is a pipelined
// chain from the root. Each operation starts with a header frame (kind,
// dtype, op, root, length, sequence number) that every rank checks against
// its predecessor's, so mismatched calls fail with collective.ErrMismatch.
//
// Progress on one core: in a process with one P (GOMAXPROCS=1, as a rank
// pinned to one core has), an operation's reads and writes over plain TCP
// try the socket without waiting and, while it has nothing, yield and try
// again as long as the process's other goroutines run (the engine yields
// between backward steps), instead of parking in Go's network poller,
// which would wake them only when the P has nothing else to do or every
// 10 ms: so an asynchronous all-reduce progresses while backward computes.
// With nothing else to run, or with more Ps, they park at once as before.
//
// Faults: the first failure breaks the group. The rank that sees it sends an
// abort frame naming the blamed rank both ways round the ring, so every rank
// returns an error naming the same peer; a dead process shows up as EOF on
// its neighbours' connections, a silent one as a timeout (Config.Timeout).
// Cancelling an operation's context also breaks the group.
//
// Blame for a silent rank: in a ring every rank waits on its predecessor, so
// when one rank stops (SIGSTOP, a hung host) the ranks behind it block in
// turn, and a per-hop timeout alone would let a blocked, live rank be blamed
// by its own successor. So a rank inside an operation that has nothing to
// send (waiting for a span from its predecessor, or its sends done and its
// receives not) sends a wait frame (kind wait, the operation's sequence
// number, no payload) every quarter timeout (its sender goroutine does, or,
// in an operation on the caller's goroutine, its reads, whose deadline then
// comes every quarter timeout however often the predecessor's own wait
// frames arrive); a receiver takes a wait frame
// for this operation or the one before as a sign of life and re-arms its
// deadline. Only the successor of a rank that sends nothing at all, neither
// data nor wait frames, times out, and it names that rank; its abort reaches
// every other rank. A rank outside any operation (computing, or never
// calling the collective) sends no wait frames, so its successor still
// times out on it.
//
// Frames are those of strategy/collective/wire (little endian, a
// fixed 24-byte header; its DecodeFrame is fuzzed). The package imports only
// the standard library, golang.org/x/sys/unix, zerolog, strategy/collective,
// its rendezvous and internal wire packages; it must not import another backend (shm, nccl,
// mpi, inproc), trainer or strategy.
package tcp
