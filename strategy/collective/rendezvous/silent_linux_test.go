package rendezvous_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/rs/zerolog"
)

// silentPort returns a loopback port where connections are neither accepted
// nor refused: a listener whose accept queue is full, so that Linux drops
// every further SYN, as a firewall that drops packets or an address where
// no machine answers does.
func silentPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	// One connection fills the queue; the listener never accepts it.
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return port
}

// A MASTER_ADDR where nothing answers (a wrong address, or a firewall that
// drops the packets to MASTER_PORT) makes every connect attempt time out
// rather than fail. The joiner's error at its timeout says what to check,
// naming MASTER_ADDR and the address, as a refused connection's does,
// rather than a bare "i/o timeout".
func TestJoinerNamesAMasterAddrWhereNothingAnswers(t *testing.T) {
	port := silentPort(t)
	nop := zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 2, MasterAddr: "127.0.0.1", MasterPort: port,
		Token: "t", BindAddr: "127.0.0.1", Timeout: 2 * time.Second, Logger: &nop})
	for _, want := range []string{"did not answer within the timeout (2s)", "i/o timeout",
		"nothing at 127.0.0.1:" + strconv.Itoa(port) + " answered", "MASTER_ADDR", "firewall", "FULGUR_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank 1's error %v lacks %q", err, want)
		}
	}
}
