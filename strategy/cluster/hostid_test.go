package cluster_test

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

// hostIDChild makes the test binary print its HostID.
const hostIDChild = "FULGUR_CLUSTER_TEST_HOSTID"

func TestHostIDChild(t *testing.T) {
	if os.Getenv(hostIDChild) == "" {
		t.Skip("run by TestHostIDIsTheMachines")
	}
	os.Stdout.WriteString("hostid=" + cluster.HostID() + "\n")
}

// Two processes of one machine (and one network namespace and /dev/shm)
// have one identity, which starts with the host name and, on Linux,
// names the network namespace the kernel reports for the process and the
// /dev/shm it sees. deploy/netns's TestNodesAreTwoHosts checks that two
// network namespaces of one kernel are two hosts.
func TestHostIDIsTheMachines(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostIDChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), hostIDChild+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	child := ""
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "hostid="); ok {
			child = v
		}
	}
	id := cluster.HostID()
	if child != id {
		t.Errorf("this process is on host %q, its child on %q: want one host", id, child)
	}
	name, _ := os.Hostname()
	if got := cluster.HostName(id); got != name {
		t.Errorf("HostName(%q) = %q, want the host name %q", id, got, name)
	}
	if runtime.GOOS == "linux" {
		ns, err := os.Readlink("/proc/self/ns/net")
		if err != nil {
			// A sandbox that hides it: the identity leaves it out.
			if strings.Contains(id, "net:[") {
				t.Errorf("HostID %q names a network namespace this process cannot read (%v)", id, err)
			}
			return
		}
		if !strings.Contains(id, "/"+ns+",shm:") {
			t.Errorf("HostID %q does not name the network namespace %s and then the /dev/shm device", id, ns)
		}
	}
}
