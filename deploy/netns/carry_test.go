//go:build linux

package netns_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/deploy/netns"
)

// carrierPids are this process's carriers' pids, by name.
func carrierPids(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		proc := "/proc/" + d.Name()
		comm, err := os.ReadFile(proc + "/comm")
		if err == nil && strings.HasPrefix(string(comm), "fulgur-relay") && parent(proc) == os.Getpid() {
			out[strings.TrimSpace(string(comm))] = pid
		}
	}
	return out
}

// upWithCarrier makes two nodes for the test's time and returns them and
// the pid of the carrier of node from's frames.
func upWithCarrier(t *testing.T, from int) (*netns.Pair, int) {
	t.Helper()
	needRoot(t)
	p, err := netns.Up(netns.Config{Delay: 100 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	pid, ok := carrierPids(t)[fmt.Sprintf("fulgur-relay%d>%d", from, 1-from)]
	if !ok {
		t.Fatalf("no carrier of node %d's frames among this process's children: %v", from, carrierPids(t))
	}
	return p, pid
}

// A carrier that dies while the link is up is an error of Close, naming
// the direction it carried and how it ended.
func TestCloseReportsACarrierThatDied(t *testing.T) {
	p, pid := upWithCarrier(t, 1)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := p.Close()
	if err == nil || !strings.Contains(err.Error(), "node 1 to node 0") || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Close after the carrier of node 1's frames was killed: %v, want an error naming node 1 to node 0 and the kill", err)
	}
}

// The carriers end with the process that made the link, also when it is
// killed and cannot Close: none is left carrying frames for nobody.
func TestCarriersEndWithTheirRelaysProcess(t *testing.T) {
	needRoot(t)
	if os.Getenv("FULGUR_NETNS_TEST_HOLD") != "" {
		return // the held process is TestHoldALink
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHoldALink$")
	cmd.Env = append(os.Environ(), "FULGUR_NETNS_TEST_HOLD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the process holding a link said nothing: %v", err)
	}
	var pids [2]int
	if _, err := fmt.Sscanf(line, "carriers %d %d", &pids[0], &pids[1]); err != nil || pids[0] <= 0 || pids[1] <= 0 {
		t.Fatalf("the process holding a link said %q (%v), want its two carriers' pids", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// The kernel ends them on their own stdin's hang-up; give it a while.
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if zombie(pid) {
				break // ended; its new parent has not reaped it yet
			}
			if time.Now().After(deadline) {
				t.Fatalf("carrier %d still runs 10 s after the process that made it was killed", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// What the killed process left is Sweep's.
	netns.Sweep()
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// TestHoldALink is TestCarriersEndWithTheirRelaysProcess's other
// process: it makes a link, says its carriers' pids and waits to be
// killed.
func TestHoldALink(t *testing.T) {
	if os.Getenv("FULGUR_NETNS_TEST_HOLD") == "" {
		t.Skip("run by TestCarriersEndWithTheirRelaysProcess")
	}
	p, err := netns.Up(netns.Config{Delay: 100 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pids := carrierPids(t)
	fmt.Printf("carriers %d %d\n", pids["fulgur-relay0>1"], pids["fulgur-relay1>0"])
	time.Sleep(time.Minute)
}

// A carrier whose interface goes away stops, and Close says why: it does
// not stay behind waiting on a socket that will never carry a frame.
func TestCarrierStopsWhenItsInterfaceGoes(t *testing.T) {
	p, pid := upWithCarrier(t, 0)
	// Deleting node 0's interface deletes its outer end too, which the
	// carrier of node 0's frames receives from.
	if out, err := exec.Command("ip", "-n", p.NS[0], "link", "del", p.Dev[0]).CombinedOutput(); err != nil {
		t.Fatalf("ip link del: %v: %s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); !zombie(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the carrier of node 0's frames still runs 10 s after its interface went")
		}
	}
	if err := p.Close(); err == nil || !strings.Contains(err.Error(), "node 0 to node 1") || !strings.Contains(err.Error(), "relay read") {
		t.Errorf("Close after node 0's interface went: %v, want the read error of the carrier of node 0's frames", err)
	}
}
