// Package tcp is the pure-Go collective backend over TCP, for ranks on one
// or many machines.
//
// Start-up (Meet): rank 0 listens at MasterAddr:MasterPort; every other rank
// dials it and proves it holds the shared Token (launchers pass it in
// FULGUR_TOKEN). The token never crosses the network: the side that accepts
// a connection sends a fresh nonce, the dialer answers with an HMAC-SHA256
// keyed by the token over both sides' nonces and its hello, and the acceptor
// proves the token back before the dialer trusts it (auth.go), so a recorded
// handshake cannot be replayed and an impostor listener is refused.
// A connection with a wrong token, a duplicate rank or a different world size
// is refused, told why, and logged with zerolog; the rendezvous keeps waiting
// for the real ranks. Rank 0 then sends everyone the table of ring addresses
// and host identities (used by shm to pick shared memory for same-host
// groups). Each rank dials the next one on the ring, with the same handshake.
//
// Operations: all-reduce is a ring reduce-scatter followed by a ring
// all-gather, both pipelined in segments (Config.SegmentBytes): a sender
// goroutine forwards each segment as soon as it has been reduced, while the
// calling goroutine receives and reduces the next. Broadcast is a pipelined
// chain from the root. Each operation starts with a header frame (kind,
// dtype, op, root, length, sequence number) that every rank checks against
// its predecessor's, so mismatched calls fail with collective.ErrMismatch.
//
// Faults: the first failure breaks the group. The rank that sees it sends an
// abort frame naming the blamed rank both ways round the ring, so every rank
// returns an error naming the same peer; a dead process shows up as EOF on
// its neighbours' connections, a silent one as a timeout (Config.Timeout).
// Cancelling an operation's context also breaks the group.
//
// Frames are little endian with a fixed 24-byte header (see wire.go);
// DecodeFrame is fuzzed. The package imports only the standard library,
// zerolog and strategy/collective; it must not import trainer or strategy.
package tcp
