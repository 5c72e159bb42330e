package netns

import "time"

// maxFrame is the longest frame: the nodes' stacks hand the link
// segmentation-offload frames of up to 64 KiB (gso_max_size), as they
// would a NIC with TSO, and the relay passes them whole with their
// vnet header, which the kernel segments where it must.
const maxFrame = 65536 + 14 + 4

// Probe is what the link gives two programs, measured over TCP.
type Probe struct {
	// RTT is the median round trip of a one-byte message.
	RTT time.Duration
	// Throughput is a bulk transfer from node 1 to node 0, in bytes per
	// second: the lower of the rate and what the relay keeps up with.
	Throughput float64
}

// RelayStats are the relay's counts since it started.
type RelayStats struct {
	Frames, Dropped int64
	// Late is the time frames left the relay after their due time (their
	// arrival in the kernel plus the delay), summed: the relay's wake-up
	// to receive beyond the delay, the sleep's overshoot and the wait
	// behind earlier frames.
	// A frame's real delay is Config.Delay plus its share of this.
	Late time.Duration
	// CPU is the CPU time of the relay's carriers, their Go runtimes'
	// threads included: the link's cost, which the host's cores pay (a
	// real link's switch and NICs do not), with the kernel's work on the
	// frames it sends, the receiving node's TCP included.
	CPU time.Duration
	// NodeCPU splits CPU by the node the frames went to: NodeCPU[i] is
	// the carrier's that delivers node i's frames, which runs on node i's
	// CPUs with Config.NodeCPUs.
	NodeCPU [2]time.Duration
}

// Since is what happened after the counts in before.
func (s RelayStats) Since(before RelayStats) RelayStats {
	return RelayStats{Frames: s.Frames - before.Frames, Dropped: s.Dropped - before.Dropped, Late: s.Late - before.Late, CPU: s.CPU - before.CPU,
		NodeCPU: [2]time.Duration{s.NodeCPU[0] - before.NodeCPU[0], s.NodeCPU[1] - before.NodeCPU[1]}}
}

// MeanLate is the mean time frames left after their due time; 0 with no
// frame relayed.
func (s RelayStats) MeanLate() time.Duration {
	if n := s.Frames - s.Dropped; n > 0 {
		return s.Late / time.Duration(n)
	}
	return 0
}
