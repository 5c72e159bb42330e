//go:build linux

package netns_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/deploy/netns"
)

// relayThread is one of the relay's carriers (a process carrying one
// direction) as /proc shows it, its threads summed.
type relayThread struct {
	allowed string        // Cpus_allowed_list of every thread ("mixed" when they differ)
	cpu     time.Duration // user and system time
	last    int           // the CPU its busiest thread last ran on
	sleeps  int           // voluntary context switches: each one a wake-up later
}

// relayThreads reads this process's carriers, children named by the
// relay, by name.
func relayThreads(t testing.TB) map[string]relayThread {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]relayThread{}
	for _, proc := range procs {
		comm, err := os.ReadFile(filepath.Join(proc, "comm"))
		name := strings.TrimSpace(string(comm))
		if err != nil || !strings.HasPrefix(name, "fulgur-relay") || parent(proc) != os.Getpid() {
			continue
		}
		tasks, err := filepath.Glob(filepath.Join(proc, "task", "*"))
		if err != nil {
			t.Fatal(err)
		}
		var th relayThread
		busiest := time.Duration(-1)
		for _, dir := range tasks {
			status, err := os.ReadFile(filepath.Join(dir, "status"))
			if err != nil {
				continue // the thread, or the carrier, ended
			}
			for _, line := range strings.Split(string(status), "\n") {
				if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
					if v = strings.TrimSpace(v); th.allowed == "" || th.allowed == v {
						th.allowed = v
					} else {
						th.allowed = "mixed"
					}
				}
				if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
					n, _ := strconv.Atoi(strings.TrimSpace(v))
					th.sleeps += n
				}
			}
			stat, err := os.ReadFile(filepath.Join(dir, "stat"))
			if err != nil {
				continue
			}
			// The fields after the command's closing parenthesis, from the
			// third (state): utime and stime are the 14th and 15th, processor
			// the 39th.
			f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			utime, _ := strconv.Atoi(f[14-3])
			stime, _ := strconv.Atoi(f[15-3])
			cpu := time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
			th.cpu += cpu
			if cpu > busiest {
				busiest = cpu
				th.last, _ = strconv.Atoi(f[39-3])
			}
		}
		out[name] = th
	}
	return out
}

// parent is the parent's pid of process proc (a /proc directory).
func parent(proc string) int {
	status, err := os.ReadFile(filepath.Join(proc, "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			pid, _ := strconv.Atoi(strings.TrimSpace(v))
			return pid
		}
	}
	return 0
}

// With NodeCPUs, each direction's carrier runs on the CPUs of the node
// that receives its frames, and only there, its runtime's threads too:
// node 1 pays for what node 0 sends it, and node 0 for node 1's replies.
func TestRelayThreadsRunOnTheReceivingNodesCPUs(t *testing.T) {
	needRoot(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs, one per node")
	}
	p, err := netns.Up(netns.Config{Rate: "10gbit", Delay: 100 * time.Microsecond, NodeCPUs: [2][]int{{0}, {1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Enough bulk for both threads to run for clock ticks: the data one
	// way, its acknowledgements the other.
	if _, err := p.Probe(ctx, 50, 256<<20); err != nil {
		t.Fatal(err)
	}
	threads := relayThreads(t)
	want := map[string]string{"fulgur-relay0>1": "1", "fulgur-relay1>0": "0"}
	for name, cpu := range want {
		th, ok := threads[name]
		if !ok {
			t.Errorf("no carrier %q carries frames (carriers: %v)", name, threads)
			continue
		}
		if th.allowed != cpu || th.last != int(cpu[0]-'0') {
			t.Errorf("carrier %s's threads may run on CPUs %q and the busiest last ran on %d, want only CPU %s (the receiving node's)", name, th.allowed, th.last, cpu)
		}
	}
	if len(threads) != len(want) {
		t.Errorf("carriers %v, want one per direction: %v", threads, want)
	}
	// The probe's bulk goes from node 1 to node 0: its thread carries
	// most of the frames.
	if th := threads["fulgur-relay1>0"]; th.cpu <= 0 {
		t.Errorf("the carrier of node 1's bulk to node 0 used no CPU: %+v", th)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// Close ends the carriers.
	if left := relayThreads(t); len(left) != 0 {
		t.Errorf("carriers outlived Close: %v", left)
	}
}

func TestNodeCPUsMustBeGivenForBothNodesAndExist(t *testing.T) {
	for _, c := range []struct {
		name string
		cpus [2][]int
		want string
	}{
		{"one node", [2][]int{{0}, nil}, "give both nodes one CPU or more, or neither"},
		{"empty", [2][]int{{}, {1}}, "give both nodes one CPU or more, or neither"},
		{"negative", [2][]int{{0}, {-1}}, "NodeCPUs[1] has CPU -1"},
		{"too large", [2][]int{{4096}, {0}}, "NodeCPUs[0] has CPU 4096"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := netns.Config{NodeCPUs: c.cpus}.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate of NodeCPUs %v: %v, want %q", c.cpus, err, c.want)
			}
		})
	}
	if err := (netns.Config{NodeCPUs: [2][]int{{0}, {0, 1}}}).Validate(); err != nil {
		t.Errorf("Validate of valid NodeCPUs: %v", err)
	}
}

// A CPU this process may not run on is refused by Up before it makes
// anything, naming the CPU and the ones it may use.
func TestUpRefusesACPUTheProcessMayNotUse(t *testing.T) {
	needRoot(t)
	cpu := runtime.NumCPU() + 3
	p, err := netns.Up(netns.Config{NodeCPUs: [2][]int{{0}, {cpu}}})
	if err == nil {
		p.Close()
		t.Fatalf("Up with node 1 on CPU %d of %d succeeded", cpu, runtime.NumCPU())
	}
	if want := "NodeCPUs[1] has CPU " + strconv.Itoa(cpu) + ", which this process may not run on: use CPUs of ["; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want %q", err, want)
	}
}
