//go:build linux

package netns_test

import (
	"net"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/deploy/netns"
)

// The relay carries its nodes' frames only, also when the host's other
// interfaces are busy while it starts: a packet socket made for every
// protocol receives from every interface until it is bound to one, and
// what it took then (here 60 KB datagrams on the loopback, which no
// link of MTU 1500 can carry) must not reach a node.
func TestRelayTakesNoFrameOfAnotherInterface(t *testing.T) {
	needRoot(t)
	lo, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Close()
	stop := make(chan struct{})
	flooded := make(chan int)
	go func() {
		b, n := make([]byte, 60000), 0
		defer func() { flooded <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := lo.WriteToUDP(b, lo.LocalAddr().(*net.UDPAddr)); err == nil {
				n++
			}
		}
	}()
	go func() { // drain, so the writes never block
		b := make([]byte, 65536)
		for {
			if _, _, err := lo.ReadFromUDP(b); err != nil {
				return
			}
		}
	}()
	var errs []error
	for range 10 {
		p, err := netns.Up(netns.Config{})
		if err != nil {
			errs = append(errs, err)
			break
		}
		// Long enough for the relay to send what it took (it reports a
		// frame no link can carry when Close returns).
		time.Sleep(20 * time.Millisecond)
		if err := p.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	close(stop)
	if n := <-flooded; n == 0 {
		t.Fatal("no datagram went over the loopback")
	}
	for _, err := range errs {
		t.Error(err)
	}
}
