package netns_test

import (
	"fmt"
	"time"

	"github.com/fulgur-ml/fulgur/deploy/netns"
)

// Plan shows what Up would run for a 10 Gbit/s link with jumbo frames:
// node 0's half (node 1's is the same with b for a). The 0.1 ms delay is the relay's, so no
// command carries it.
func ExamplePlan() {
	cmds, err := netns.Plan(4242, 1, netns.Config{Rate: "10gbit", Delay: 100 * time.Microsecond, MTU: 9000})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range cmds[:len(cmds)/2] {
		fmt.Println(c)
	}
	// Output:
	// ip netns add fulgur-39u-1-0
	// ip link add fg39u-1a type veth peer name fg39u-1ao
	// ip link set fg39u-1a mtu 9000 gso_max_size 65536 gro_max_size 65536
	// ip link set fg39u-1ao mtu 9000 gso_max_size 65536 gro_max_size 65536
	// ip link set fg39u-1a netns fulgur-39u-1-0
	// ip -n fulgur-39u-1-0 link set lo up
	// ip -n fulgur-39u-1-0 addr add 10.231.0.1/24 dev fg39u-1a
	// ip -n fulgur-39u-1-0 link set fg39u-1a up
	// ip link set fg39u-1ao up
	// ip netns exec fulgur-39u-1-0 tc qdisc add dev fg39u-1a root tbf rate 10gbit burst 1250000 latency 10ms
}
