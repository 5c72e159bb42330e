package netns_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulgur-ml/fulgur/deploy/netns"
)

func TestPlan(t *testing.T) {
	cases := []struct {
		name    string
		pid, k  int
		cfg     netns.Config
		wantTbf string // the tbf command, "" for none
	}{
		{"unshaped", 4242, 1, netns.Config{}, ""},
		{"10gbit", 4242, 2, netns.Config{Rate: "10gbit", Delay: 100 * time.Microsecond},
			"tc qdisc add dev fg39ux2a root tbf rate 10gbit burst 1250000 latency 10ms"},
		// The bucket never falls below 64 KiB, whatever the rate.
		{"slow link, largest pid", 4194304, 1295, netns.Config{Rate: "8mbit"},
			"tc qdisc add dev fg2hwcgxzza root tbf rate 8mbit burst 65536 latency 10ms"},
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
	err := netns.Config{Rate: "10gbps", Delay: -time.Millisecond, Loss: 1.5}.Validate()
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	for _, want := range []string{`Rate is "10gbps"`, "Delay is -1ms", "Loss is 1.5"} {
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

// inNS runs f on a thread in namespace ns: a socket belongs to the
// namespace it was made in, whichever thread uses it later.
func inNS(t *testing.T, ns string, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			t.Errorf("setns %s: %v", ns, err)
			return
		}
		f()
	}()
	<-done
}

// Two nodes reach each other through the shaped, delayed link, and
// nothing of them is left after Close.
func TestUpJoinsTwoNodes(t *testing.T) {
	needRoot(t)
	p, err := netns.Up(netns.Config{Rate: "1gbit", Delay: 200 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var ln net.Listener
	inNS(t, p.NS[0], func() { ln, err = net.Listen("tcp", p.Addr[0]+":0") })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "echo %s", line)
	}()
	var conn net.Conn
	inNS(t, p.NS[1], func() { conn, err = net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second) })
	if err != nil {
		t.Fatalf("node 1 cannot reach node 0 at %s: %v", ln.Addr(), err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "hello\n")
	got, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || got != "echo hello\n" {
		t.Fatalf("echo %q, %v; want %q", got, err, "echo hello\n")
	}
	if p.Relay.Frames() < 6 { // handshake, line and echo, acknowledgements
		t.Errorf("%d frames went through the relay, want the connection's", p.Relay.Frames())
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
