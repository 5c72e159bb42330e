// Package netns stands two machines up on one Linux host: two network
// namespaces ("nodes"), each with one end of a veth pair whose other end
// stays in the caller's namespace, where a relay copies Ethernet frames
// between the outer ends. The relay adds a fixed delay to every frame
// and can drop or cut them: tc netem's job, done in user space because
// kernels without sch_netem (CONFIG_NET_SCH_NETEM) are common, and such
// kernels often lack the qdiscs that honour a departure time set per
// packet (fq, etf) too. The rate is shaped with tc's token bucket (tbf)
// on each node's interface, which such kernels do have. The relay's own
// cost is the CPU time of its carriers, one process per direction (the
// calling program re-executed), which Stats reports; Config.NodeCPUs
// puts each on the cores of the node it delivers to, which pay for it as
// a host pays for its network receive.
//
// The fault suite (chaos/) and the scale-out benchmark (cmd/bench
// -workload scaleout) use it. Plan lists the ip and tc commands Up runs,
// without running them; Up needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN),
// and fails with a message saying so, never a panic. Everything Up creates
// is named after the creating process, so Sweep removes what a killed
// process left behind; Close removes it otherwise.
//
// netns imports nothing of fulgur.
package netns
