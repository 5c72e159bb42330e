package netns_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/deploy/netns"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

// hostIDChild makes the test binary print what a rank started there sees:
// "id" its cluster.HostID; "meet RANK ADDR PORT" whether a rendezvous of two
// ranks with rank 0 at ADDR:PORT finds both on one host (SameHost, which
// makes the auto backend pick shared memory).
const hostIDChild = "FULGUR_NETNS_TEST_HOSTID"

func TestHostIDChild(t *testing.T) {
	what, ok := os.LookupEnv(hostIDChild)
	if !ok {
		t.Skip("run by TestNodesAreTwoHosts")
	}
	f := strings.Fields(what)
	if f[0] == "id" {
		fmt.Printf("hostid=%s\n", cluster.HostID())
		return
	}
	rank, _ := strconv.Atoi(f[1])
	port, _ := strconv.Atoi(f[3])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rv, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: rank, Size: 2, MasterAddr: f[2], MasterPort: port, Token: "t", Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	fmt.Printf("samehost=%v\n", rv.SameHost())
}

// The two nodes are two machines to a job: their ranks' host identities
// differ and a rendezvous between them finds two hosts, so the auto
// backend connects them over the network rather than through /dev/shm.
// Both nodes share the host name, boot id and /dev/shm of this machine:
// before, they had the same identity, and auto picked shared memory across
// the link the nodes are meant to test. Two processes of one node are one
// host.
func TestNodesAreTwoHosts(t *testing.T) {
	needRoot(t)
	p, err := netns.Up(netns.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	run := func(node int, what string) string {
		t.Helper()
		args := []string{os.Args[0], "-test.run=^TestHostIDChild$", "-test.count=1"}
		if node >= 0 {
			args = append(p.Exec(node), args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), hostIDChild+"="+what)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("%s in node %d: %v\n%s%s", what, node, err, out, stderr.String())
		}
		for _, l := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok && (k == "hostid" || k == "samehost") {
				return v
			}
		}
		t.Errorf("%s in node %d printed no answer:\n%s", what, node, out)
		return ""
	}
	outside, zero, zeroAgain, one := run(-1, "id"), run(0, "id"), run(0, "id"), run(1, "id")
	if zero == one || zero == outside {
		t.Errorf("host identities: node 0 %q, node 1 %q, the caller's namespace %q: want three hosts", zero, one, outside)
	}
	if zero != zeroAgain {
		t.Errorf("two processes of node 0 have the identities %q and %q: want one host", zero, zeroAgain)
	}
	if cluster.HostName(zero) != cluster.HostName(one) {
		t.Errorf("the nodes' host names %q and %q differ: this test means nodes of one name", cluster.HostName(zero), cluster.HostName(one))
	}
	const port = "29517" // nothing else listens inside the new namespaces
	same := make([]string, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			same[rank] = run(rank, fmt.Sprintf("meet %d %s %s", rank, p.Addr[0], port))
		}()
	}
	wg.Wait()
	if same[0] != "false" || same[1] != "false" {
		t.Errorf("a rendezvous of rank 0 in node 0 and rank 1 in node 1 says SameHost %q and %q: want false on both", same[0], same[1])
	}
}
