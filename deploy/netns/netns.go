package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes the link between the two nodes. The zero value is an
// unshaped link with no delay.
type Config struct {
	// Rate shapes each direction with tc tbf, in tc's syntax ("10gbit",
	// "800mbit"). Empty: no shaping (the relay's own speed is the limit).
	Rate string
	// Delay is added to every frame in each direction by the relay (so a
	// round trip gets twice it). 0: none.
	Delay time.Duration
	// Loss is the fraction of frames the relay drops, 0 to 1.
	Loss float64
	// MTU of the link; 0: 1500. Without Loss, the nodes' stacks hand the
	// link frames of up to 64 KiB with segmentation offload (as to a NIC
	// with TSO), which the relay carries whole; the MTU sizes the
	// segments.
	MTU int
	// NodeCPUs are the CPUs each node's programs run on (pinned with
	// taskset or sched_setaffinity), one list per node. The relay
	// carries each direction in a process of its own, pinned to the
	// CPUs of the node that receives that direction's frames: that
	// node's cores pay for its network receive (the relay's send runs
	// the node's TCP), as a real host's do, and no node pays for the
	// other's. nil: the carriers run wherever the scheduler puts them.
	// Give both lists or neither; every CPU must be one this process
	// may run on.
	NodeCPUs [2][]int
}

// Validate returns every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Rate != "" {
		if _, err := ParseRate(c.Rate); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Delay < 0 {
		errs = append(errs, fmt.Errorf("netns: Delay is %v: use 0 or more", c.Delay))
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 65535) {
		errs = append(errs, fmt.Errorf("netns: MTU is %d: use 576 to 65535, or 0 for 1500", c.MTU))
	}
	if c.Loss < 0 || c.Loss > 1 || c.Loss != c.Loss {
		errs = append(errs, fmt.Errorf("netns: Loss is %v: use a fraction from 0 to 1", c.Loss))
	}
	if (c.NodeCPUs[0] == nil) != (c.NodeCPUs[1] == nil) || c.NodeCPUs[0] != nil && (len(c.NodeCPUs[0]) == 0 || len(c.NodeCPUs[1]) == 0) {
		errs = append(errs, fmt.Errorf("netns: NodeCPUs is %v: give both nodes one CPU or more, or neither (nil) to let the relay's carriers run anywhere", c.NodeCPUs))
	}
	for i, cpus := range c.NodeCPUs {
		for _, cpu := range cpus {
			if cpu < 0 || cpu >= maxCPUs {
				errs = append(errs, fmt.Errorf("netns: NodeCPUs[%d] has CPU %d: use CPU numbers from 0 to %d, as taskset -c takes them", i, cpu, maxCPUs-1))
			}
		}
	}
	return errors.Join(errs...)
}

// rateBits parses a tc rate ("10gbit", "100mbit", "1000kbit", "5000bit")
// into bits per second.
func ParseRate(s string) (float64, error) {
	units := []struct {
		suffix string
		scale  float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(strings.ToLower(s), u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 {
				break
			}
			return f * u.scale, nil
		}
	}
	return 0, fmt.Errorf("netns: Rate is %q: use a positive number of gbit, mbit, kbit or bit per second, as tc writes it (e.g. 10gbit)", s)
}

// Pair is two nodes joined by a relayed link.
type Pair struct {
	// NS are the namespaces' names (ip netns), Dev each node's interface,
	// Addr its IPv4 address (10.231.0.1 and .2, which exist only inside
	// the namespaces).
	NS, Dev, Addr [2]string
	// Relay carries the frames between the nodes.
	Relay *Relay
	outer [2]string
	once  sync.Once
	err   error
}

// Cmd is one command line Up runs.
type Cmd []string

func (c Cmd) String() string { return strings.Join(c, " ") }

// prefix starts the names of everything Up creates: Sweep recognises
// them by it, and by the creator's pid that follows.
const prefix = "fulgur-"

var seq atomic.Int32

// names makes a pair's names from the creating process's id and a
// sequence number, in base 36 and joined by "-", which no base-36 digit
// is. Interface names are limited to 15 bytes: "fg" + the two numbers +
// the node's letter + "o" for the outer end is 12 up to the 1296th pair.
func names(pid, k int) *Pair {
	p := &Pair{}
	id := strconv.FormatInt(int64(pid), 36) + "-" + strconv.FormatInt(int64(k), 36)
	for i := range 2 {
		p.NS[i] = prefix + id + "-" + strconv.Itoa(i)
		p.Dev[i] = "fg" + id + string(rune('a'+i))
		p.outer[i] = p.Dev[i] + "o"
		p.Addr[i] = fmt.Sprintf("10.231.0.%d", i+1)
	}
	return p
}

// Plan lists the commands that make the pair of process pid's k-th call
// to Up, in order: the namespaces, the veths (offload frames of at most
// 64 KiB, which the relay's slots hold, or of the MTU when c.Loss drops
// frames), addresses, and tbf on each node's interface when c.Rate is
// set. It runs nothing.
func Plan(pid, k int, c Config) ([]Cmd, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	p := names(pid, k)
	return p.plan(c), nil
}

func (p *Pair) plan(c Config) []Cmd {
	mtu := "1500"
	if c.MTU > 0 {
		mtu = strconv.Itoa(c.MTU)
	}
	gso := strconv.Itoa(maxFrame - 14 - 4)
	if c.Loss > 0 {
		// Loss drops frames: one an MTU long, as netem's loss drops
		// packets, not an offload frame of 40 at once.
		gso = mtu
	}
	var cmds []Cmd
	for i := range 2 {
		ns, dev, out := p.NS[i], p.Dev[i], p.outer[i]
		cmds = append(cmds,
			Cmd{"ip", "netns", "add", ns},
			Cmd{"ip", "link", "add", dev, "type", "veth", "peer", "name", out},
			Cmd{"ip", "link", "set", dev, "mtu", mtu, "gso_max_size", gso, "gro_max_size", gso},
			Cmd{"ip", "link", "set", out, "mtu", mtu, "gso_max_size", gso, "gro_max_size", gso},
			Cmd{"ip", "link", "set", dev, "netns", ns},
			Cmd{"ip", "-n", ns, "link", "set", "lo", "up"},
			Cmd{"ip", "-n", ns, "addr", "add", p.Addr[i] + "/24", "dev", dev},
			Cmd{"ip", "-n", ns, "link", "set", dev, "up"},
			Cmd{"ip", "link", "set", out, "up"})
		if c.Rate != "" {
			// The bucket holds 1 ms at the rate (at least 64 KiB): enough
			// for the timer's granularity, small enough to shape; the
			// queue holds 10 ms more before tbf drops.
			bits, _ := ParseRate(c.Rate)
			burst := max(int(bits/8/1000), 64<<10)
			cmds = append(cmds, Cmd{"ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
				"rate", c.Rate, "burst", strconv.Itoa(burst), "latency", "10ms"})
		}
	}
	return cmds
}

// Check reports whether this process can make namespaces: root's
// capabilities and the ip and tc commands (iproute2).
func Check() error {
	if err := platformCheck(); err != nil {
		return err
	}
	caps, err := effectiveCaps()
	if err != nil {
		return fmt.Errorf("netns: cannot read this process's capabilities: %w", err)
	}
	return check(caps, exec.LookPath)
}

const (
	capNetAdmin = 12
	capSysAdmin = 21
)

func check(caps uint64, lookPath func(string) (string, error)) error {
	var errs []error
	var missing []string
	for _, c := range []struct {
		bit  uint
		name string
	}{{capSysAdmin, "CAP_SYS_ADMIN"}, {capNetAdmin, "CAP_NET_ADMIN"}} {
		if caps&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("two nodes on one host need network namespaces, which need %s: run as root (sudo), or in a container started with --cap-add SYS_ADMIN --cap-add NET_ADMIN", strings.Join(missing, " and ")))
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := lookPath(tool); err != nil {
			errs = append(errs, fmt.Errorf("two nodes on one host need the %s command, which is not on PATH: install iproute2 (Debian: apt-get install iproute2)", tool))
		}
	}
	return errors.Join(errs...)
}

// effectiveCaps reads CapEff of /proc/self/status.
func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// maxCPUs bounds a CPU number: Linux's CPU_SETSIZE, the size of the
// affinity mask the relay's carriers are pinned with.
const maxCPUs = 1024

// Up makes the two nodes and starts the relay between them. The caller
// must Close the pair; whatever a killed caller left behind, Sweep
// removes.
func Up(c Config) (*Pair, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := Check(); err != nil {
		return nil, err
	}
	if err := checkCPUs(c.NodeCPUs); err != nil {
		return nil, err
	}
	p := names(os.Getpid(), int(seq.Add(1)))
	for _, cmd := range p.plan(c) {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			err = fmt.Errorf("netns: %s: %v: %s", cmd, err, strings.TrimSpace(string(out)))
			return nil, errors.Join(err, p.Close())
		}
	}
	r, err := newRelay(p.outer[0], p.outer[1], c.Delay, c.Loss, c.NodeCPUs)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("netns: start the relay: %w", err), p.Close())
	}
	p.Relay = r
	return p, nil
}

// Exec is the command prefix that runs a program on node i: ip netns exec
// and the namespace. ip execs the program, so its pid is the program's.
func (p *Pair) Exec(i int) []string { return []string{"ip", "netns", "exec", p.NS[i]} }

// Close stops the relay and deletes the namespaces, and with them the
// veths. It returns the relay's first error; a second call returns the
// first call's result.
func (p *Pair) Close() error {
	p.once.Do(func() {
		var errs []error
		if p.Relay != nil {
			errs = append(errs, p.Relay.close())
		}
		for i := range 2 {
			// Either may not exist yet when Up failed half way.
			exec.Command("ip", "netns", "del", p.NS[i]).Run()
			exec.Command("ip", "link", "del", p.outer[i]).Run()
		}
		p.err = errors.Join(errs...)
	})
	return p.err
}

// Sweep deletes the namespaces that Up in a process that no longer runs
// left behind (one killed before it could Close), and returns their names.
func Sweep() ([]string, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("netns: ip netns list: %w", err)
	}
	var gone []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pid, ok := creator(f[0])
		if !ok || alive(pid) {
			continue
		}
		if err := exec.Command("ip", "netns", "del", f[0]).Run(); err != nil {
			return gone, fmt.Errorf("netns: delete %s left by process %d: %w", f[0], pid, err)
		}
		gone = append(gone, f[0])
	}
	return gone, nil
}

// creator returns the pid in a namespace name Up made.
func creator(ns string) (int, bool) {
	rest, ok := strings.CutPrefix(ns, prefix)
	if !ok {
		return 0, false
	}
	f := strings.Split(rest, "-")
	if len(f) != 3 {
		return 0, false
	}
	id := f[0]
	pid, err := strconv.ParseInt(id, 36, 32)
	return int(pid), err == nil && pid > 0
}
