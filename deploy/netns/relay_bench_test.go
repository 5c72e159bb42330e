//go:build linux

package netns_test

import (
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulgur-ml/fulgur/deploy/netns"
)

func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// relayWakeups is how many times the threads of the relay's carriers
// (their runtimes' included) went to sleep, summed: each costs its
// node's core a wake-up.
func relayWakeups(b *testing.B) int {
	n := 0
	for _, th := range relayThreads(b) {
		n += th.sleeps
	}
	return n
}

// BenchmarkRelayAllReduce is the scale-out benchmark's link without its
// training: two nodes on the benchmark's link (10 Gbit/s, 100 µs each
// way, MTU 9000, each direction's carrier on the receiving node's
// core) exchange what one resnet8 step's ring all-reduce of 311 KB
// over two ranks sends (each rank 155 KB to the other, twice), with 2
// ms of quiet between steps, as a step's compute leaves it. It reports
// the relay's CPU time a step and a frame, the frames a step, and how
// late frames left on average, and the CPU time a step of the whole:
// this process and the carriers. Needs root.
//
//	go test -run '^$' -bench RelayAllReduce -benchtime 400x ./deploy/netns/
func BenchmarkRelayAllReduce(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("makes network namespaces, which needs root")
	}
	c := netns.Config{Rate: "10gbit", Delay: 100 * time.Microsecond, MTU: 9000}
	if runtime.NumCPU() >= 2 {
		c.NodeCPUs = [2][]int{{0}, {1}}
	}
	p, err := netns.Up(c)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var ln net.Listener
	if err := inNS(p.NS[0], func() (err error) { ln, err = net.Listen("tcp", p.Addr[0]+":0"); return }); err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var conns [2]net.Conn
	accepted := make(chan error, 1)
	go func() { var err error; conns[0], err = ln.Accept(); accepted <- err }()
	if err := inNS(p.NS[1], func() (err error) { conns[1], err = net.Dial("tcp", ln.Addr().String()); return }); err != nil {
		b.Fatal(err)
	}
	if err := <-accepted; err != nil {
		b.Fatal(err)
	}
	for _, c := range conns {
		defer c.Close()
		c.(*net.TCPConn).SetNoDelay(true)
	}
	const half = 311016 / 2
	bufs := [2][2][]byte{{make([]byte, half), make([]byte, half)}, {make([]byte, half), make([]byte, half)}}
	// step: each rank sends its half and receives the other's, twice.
	step := func() error {
		for range 2 {
			errs := make(chan error, 4)
			for r, c := range conns {
				go func() { _, err := c.Write(bufs[r][0]); errs <- err }()
				go func() { _, err := io.ReadFull(c, bufs[r][1]); errs <- err }()
			}
			for range 4 {
				if err := <-errs; err != nil {
					return err
				}
			}
		}
		return nil
	}
	for range 5 { // the connection's window opens
		if err := step(); err != nil {
			b.Fatal(err)
		}
	}
	before, cpu0, wakes0 := p.Relay.Stats(), processCPU(b), relayWakeups(b)
	b.ResetTimer()
	for range b.N {
		if err := step(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		time.Sleep(2 * time.Millisecond)
		b.StartTimer()
	}
	b.StopTimer()
	st := p.Relay.Stats().Since(before)
	n := float64(b.N)
	b.ReportMetric(float64(relayWakeups(b)-wakes0)/n, "relay-wakeups/step")
	// The whole: this process (the two ends' TCP and its Go runtime's
	// threads) and the relay's carriers, their runtimes' threads
	// included.
	b.ReportMetric(float64((processCPU(b)-cpu0+st.CPU).Microseconds())/n, "process-cpu-µs/step")
	b.ReportMetric(float64(st.CPU.Microseconds())/n, "relay-cpu-µs/step")
	b.ReportMetric(float64(st.Frames)/n, "frames/step")
	if st.Frames > 0 {
		b.ReportMetric(float64(st.CPU.Nanoseconds())/1e3/float64(st.Frames), "relay-cpu-µs/frame")
	}
	b.ReportMetric(float64(st.MeanLate().Nanoseconds())/1e3, "late-µs")
}
