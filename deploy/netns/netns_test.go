package netns_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/deploy/netns"
)

func TestPlan(t *testing.T) {
	cases := []struct {
		name    string
		pid, k  int
		cfg     netns.Config
		wantTbf string // the tbf command, "" for none
		wantGSO string // the largest offload frame
	}{
		{"unshaped", 4242, 1, netns.Config{}, "", "65536"},
		// Loss drops frames of the MTU, not 64 KiB of them at once.
		{"lossy", 4242, 3, netns.Config{Loss: 0.01}, "", "1500"},
		{"10gbit", 4242, 2, netns.Config{Rate: "10gbit", Delay: 100 * time.Microsecond},
			"tc qdisc add dev fg39u-2a root tbf rate 10gbit burst 1250000 latency 10ms", "65536"},
		// The bucket never falls below 64 KiB, whatever the rate.
		{"slow link, largest pid", 4194304, 1295, netns.Config{Rate: "8mbit", Loss: 0.5, MTU: 9000},
			"tc qdisc add dev fg2hwcg-zza root tbf rate 8mbit burst 65536 latency 10ms", "9000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmds, err := netns.Plan(c.pid, c.k, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var tbf []string
			adds := 0
			for _, cmd := range cmds {
				s := cmd.String()
				if i := strings.Index(s, "tc qdisc"); i >= 0 {
					tbf = append(tbf, s[i:])
				}
				if strings.Contains(s, " gso_max_size ") && !strings.HasSuffix(s, " gso_max_size "+c.wantGSO+" gro_max_size "+c.wantGSO) {
					t.Errorf("%q: want offload frames of at most %s bytes", s, c.wantGSO)
				}
				if strings.HasPrefix(s, "ip netns add ") {
					adds++
				}
				// Interface names: at most 15 bytes (IFNAMSIZ - 1).
				for i, a := range cmd {
					if i > 0 && (cmd[i-1] == "add" && cmd[0] == "ip" && cmd[1] == "link" || cmd[i-1] == "name" || cmd[i-1] == "dev") && len(a) > 15 {
						t.Errorf("interface name %q in %q is longer than 15 bytes", a, s)
					}
				}
			}
			if adds != 2 {
				t.Errorf("%d namespaces made, want 2:\n%v", adds, cmds)
			}
			switch {
			case c.wantTbf == "" && len(tbf) > 0:
				t.Errorf("an unshaped link got %v", tbf)
			case c.wantTbf != "" && (len(tbf) != 2 || tbf[0] != c.wantTbf):
				t.Errorf("tbf commands %q, want two, the first %q", tbf, c.wantTbf)
			}
		})
	}
}

func TestConfigValidateNamesEveryProblem(t *testing.T) {
	err := netns.Config{Rate: "10gbps", Delay: -time.Millisecond, Loss: 1.5, MTU: 100}.Validate()
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	for _, want := range []string{`Rate is "10gbps"`, "Delay is -1ms", "Loss is 1.5", "MTU is 100"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not mention %q", err, want)
		}
	}
	if _, err := netns.Plan(1, 1, netns.Config{Rate: "fast"}); err == nil || !strings.Contains(err.Error(), `"fast"`) {
		t.Errorf("Plan of rate %q: %v, want the rate named", "fast", err)
	}
}

// Without iproute2 Up says what to install, and creates nothing.
func TestUpWithoutIPCommandSaysWhatItNeeds(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	p, err := netns.Up(netns.Config{})
	if err == nil {
		p.Close()
		t.Fatal("Up succeeded without the ip command")
	}
	if !strings.Contains(err.Error(), "the ip command") || !strings.Contains(err.Error(), "iproute2") {
		t.Errorf("error %q does not say that ip (iproute2) is missing", err)
	}
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes network namespaces, which needs root")
	}
}

// Two nodes reach each other through the shaped, delayed link, and
// nothing of them is left after Close.
func TestUpJoinsTwoNodes(t *testing.T) {
	needRoot(t)
	const delay = 300 * time.Microsecond
	p, err := netns.Up(netns.Config{Rate: "1gbit", Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, err := p.Probe(ctx, 20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("round trip %v, bulk %.0f MB/s, frames %v late on average", pr.RTT, pr.Throughput/1e6, p.Relay.Stats().MeanLate())
	// A lower bound only, which no load can break: every frame waits
	// for its delay in each direction.
	if pr.RTT < 2*delay {
		t.Errorf("round trip %v, below the 2 x %v the relay adds", pr.RTT, delay)
	}
	if pr.Throughput <= 0 {
		t.Errorf("throughput %v", pr.Throughput)
	}
	if st := p.Relay.Stats(); st.CPU <= 0 || st.Late < 0 {
		t.Errorf("relay stats %+v: no CPU time for the frames it carried", st)
	}
	// 20 round trips and 1 MiB in frames of at most 64 KiB (offload).
	if n := p.Relay.Frames(); n < 40+(1<<20)/65536 {
		t.Errorf("%d frames went through the relay, fewer than the probe sent", n)
	}
	// Node 1 has no address of node 0's: the frames cannot have taken
	// another way.
	if out, err := exec.Command("ip", "-n", p.NS[1], "-4", "addr").Output(); err != nil || strings.Contains(string(out), p.Addr[0]+"/") {
		t.Errorf("node 1's addresses (%v):\n%s", err, out)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range p.NS {
		if strings.Contains(string(out), ns) {
			t.Errorf("namespace %s outlived Close:\n%s", ns, out)
		}
	}
	if _, err := net.InterfaceByName(p.Dev[0] + "o"); err == nil {
		t.Errorf("the outer end of %s outlived Close", p.Dev[0])
	}
}

// Sweep removes the namespaces of a process that is gone, and leaves a
// live one's.
func TestSweepRemovesWhatADeadProcessLeft(t *testing.T) {
	needRoot(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	var made []string
	for _, pid := range []int{dead.Process.Pid, os.Getpid()} {
		cmds, err := netns.Plan(pid, 999, netns.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ns := cmds[0][3]
		if out, err := exec.Command(cmds[0][0], cmds[0][1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", cmds[0], err, out)
		}
		defer exec.Command("ip", "netns", "del", ns).Run()
		made = append(made, ns)
	}
	gone, err := netns.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(gone, " ") != made[0] {
		t.Errorf("Sweep removed %v, want only the dead process's %s (not ours, %s)", gone, made[0], made[1])
	}
}
