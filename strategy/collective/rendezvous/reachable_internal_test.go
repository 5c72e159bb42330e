package rendezvous

import (
	"slices"
	"testing"
)

// A rank on rank 0's machine that reached rank 0 over loopback (MASTER_ADDR
// is the host's own name, which Debian maps to 127.0.1.1) announced a
// loopback address, which a rank on another machine cannot dial: the table
// gives it rank 0's host instead, with its own port. Addresses of a job on
// one machine, and real addresses, stay as announced. (Internal: the host
// identities come from each machine's name and boot id, which a test on one
// machine cannot make differ.)
func TestTableAddressesReachableFromOtherMachines(t *testing.T) {
	for _, tc := range []struct {
		name         string
		hosts, addrs []string
		adv          string
		want         []string
	}{
		{"two machines, MASTER_ADDR loopback on node 0",
			[]string{"a", "a", "b", "b"}, []string{"node0:100", "127.0.0.1:101", "10.0.0.2:102", "10.0.0.2:103"}, "node0",
			[]string{"node0:100", "node0:101", "10.0.0.2:102", "10.0.0.2:103"}},
		{"IPv6 loopback",
			[]string{"a", "a", "b"}, []string{"node0:100", "[::1]:101", "10.0.0.2:102"}, "node0",
			[]string{"node0:100", "node0:101", "10.0.0.2:102"}},
		{"one machine",
			[]string{"a", "a", "a"}, []string{"127.0.0.1:100", "127.0.0.1:101", "127.0.0.1:102"}, "127.0.0.1",
			[]string{"127.0.0.1:100", "127.0.0.1:101", "127.0.0.1:102"}},
		{"one machine by name",
			[]string{"a", "a"}, []string{"node0:100", "127.0.0.1:101"}, "node0",
			[]string{"node0:100", "127.0.0.1:101"}},
		{"real addresses",
			[]string{"a", "a", "b"}, []string{"10.0.0.1:100", "10.0.0.1:101", "10.0.0.2:102"}, "10.0.0.1",
			[]string{"10.0.0.1:100", "10.0.0.1:101", "10.0.0.2:102"}},
		{"rank 0 itself at a loopback address",
			[]string{"a", "a", "b"}, []string{"127.0.0.1:100", "127.0.0.1:101", "10.0.0.2:102"}, "127.0.0.1",
			[]string{"127.0.0.1:100", "127.0.0.1:101", "10.0.0.2:102"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := slices.Clone(tc.addrs)
			reachable(tc.hosts, got, tc.adv)
			if !slices.Equal(got, tc.want) {
				t.Errorf("addresses %v, want %v", got, tc.want)
			}
		})
	}
}
