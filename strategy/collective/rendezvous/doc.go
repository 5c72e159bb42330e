// Package rendezvous is how the ranks of a job find and trust each other,
// shared by the tcp, shm and nccl backends.
//
// Meet: rank 0 listens at MasterAddr:MasterPort; every other rank dials it
// (retrying until it is up) and proves it holds the shared Token (launchers
// pass it in FULGUR_TOKEN, TokenEnv). The token never crosses the network:
// the side that accepts a connection sends a fresh nonce, the dialer answers
// with an HMAC-SHA256 keyed by the token over both sides' nonces and its
// hello, and the acceptor proves the token back before the dialer trusts it
// (auth.go), so a recorded handshake cannot be replayed and an impostor
// listener is refused. Handshakes run side by side (at most 64 at once; more
// connections wait their turn), so a stranger that connects and stays silent
// does not hold the real ranks back.
// A connection with a wrong token, a duplicate rank, a rank out of range or a
// different world size is refused, told why, and logged with zerolog; the
// rendezvous keeps waiting for the real ranks, says every quarter timeout
// (at most 30 s) whom it waits for, and, at the timeout, names the ranks
// that never joined and the last refusal. A joiner retries until the
// timeout while rank 0 is not listening, while MasterAddr does not resolve
// (warned once) and while what answers at MasterAddr:MasterPort sends no
// challenge (another program, or rank 0 busy); bytes that are not fulgur
// frames there fail it at once. Rank 0 then sends everyone the table of data
// addresses and host identities (HostID; SameHost lets shm pick shared
// memory).
//
// Host identity: HostID is the host name and the kernel's boot id and, on
// Linux, the process's network namespace and the device of its /dev/shm
// (strategy/cluster.HostID): ranks in two network namespaces of one kernel
// (deploy/netns's two nodes, containers with networks of their own) or
// with two /dev/shm mounts (containers with IPC namespaces of their own)
// are on two hosts, so auto picks tcp between them, not shared memory that
// one could not see or that stands for a network the job means to cross.
// Two processes that share the network namespace and /dev/shm (a pod's
// containers, ranks started side by side) are one host. It costs a link
// read and a stat, and makes no file to probe.
//
// Abort: a process that fails before it meets the others (a bad flag, a
// checkpoint or data set missing on its machine) calls Abort with its
// reason instead of leaving them to wait for the timeout. A rank other
// than 0 dials rank 0 (retrying while it is not up) and presents a hello
// carrying the reason, signed with the token like every hello, so a
// stranger cannot end a job; rank 0 sends every rank that has joined, and
// every rank that arrives within 30 s, the verdict (AbortedError: the
// rank, its host name and its reason) and fails with it. A rank 0 that
// fails listens at its port and tells every rank that arrives. Rank 0
// closes the connections it told only when every rank has heard it (or
// it gives up), and each told rank returns at that close: a launcher that
// stops a machine's other ranks when one ends (fulgur run) does not stop
// rank 0 while ranks of other machines are still on their way. A process
// that never learned the address cannot tell anyone: rank 0's timeout then
// names the ranks that never joined.
//
// After Meet: Exchange gives every rank every rank's small blob through rank
// 0 (shm's file name, NCCL's unique id); Watch turns the end of a star
// connection into a lost-peer callback; DialPeer and AcceptPeer open data
// connections between two ranks (tcp's ring), authenticated the same way,
// refusing and logging strangers, garbage and wrong ranks on the data port.
//
// Split makes a sub-group's rendezvous (collective.Splitter in tcp, shm
// and nccl): its first member listens on a fresh port, every rank of the
// parent learns the address over the parent's own collective, and the
// members meet as a job of their own, with the parent's token and TLS.
//
// TLS: with Config.TLS (NewTLS, LoadTLS, or TLSFromEnv reading
// FULGUR_TLS_CERT, FULGUR_TLS_KEY and FULGUR_TLS_CA), every connection,
// star and data, runs TLS 1.3 with mutual authentication against the job's
// CA, and the token handshake runs inside it. A peer without a certificate
// signed by that CA, or without TLS, is refused and logged, and its own
// error says which setting to fix; the job goes on.
//
// Frames are those of strategy/collective/wire. The package imports
// only the standard library, zerolog, strategy/collective, its wire
// package and strategy/cluster (HostID); it must not import a backend (tcp, shm, nccl, mpi, inproc),
// trainer or strategy.
package rendezvous
