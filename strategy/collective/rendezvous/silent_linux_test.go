package rendezvous_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
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

// noRouteEnv, set in the child process, says that it runs in the private
// network namespace that TestJoinerKeepsNoRouteToHost made.
const noRouteEnv = "FULGUR_TEST_NOROUTE_NETNS"

// A MASTER_ADDR on this machine's network where no machine answers (a
// mistyped address of the right subnet): each connect waits for the
// neighbour lookup, then fails with "no route to host", and the last one,
// cut by the timeout, with "i/o timeout". The error at the timeout keeps
// the former, which says what happened, with what to check. The test runs
// again in a private network namespace (unshare -n) that holds one veth
// pair, 10.77.0.1/24 on one end and nothing answering on the other: no
// packet leaves it.
func TestJoinerKeepsNoRouteToHost(t *testing.T) {
	if os.Getenv(noRouteEnv) == "" {
		if os.Geteuid() != 0 {
			t.Skip("making a private network namespace needs root (CI runs as root)")
		}
		for _, tool := range []string{"unshare", "ip"} {
			if _, err := exec.LookPath(tool); err != nil {
				t.Fatalf("%s (util-linux, iproute2) is needed to make a private network namespace: %v", tool, err)
			}
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("unshare", "-n", "sh", "-c",
			`ip link set lo up && ip link add fgnr0 type veth peer name fgnr1 && ip addr add 10.77.0.1/24 dev fgnr0 && `+
				`ip link set fgnr0 up && ip link set fgnr1 up && exec "$0" -test.run "^$1\$" -test.count 1 -test.v`, exe, t.Name())
		cmd.Env = append(os.Environ(), noRouteEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
			t.Fatalf("in a private network namespace: %v\n%s", err, out)
		}
		return
	}
	nop := zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 2, MasterAddr: "10.77.0.3", MasterPort: 29500,
		Token: "t", Timeout: 8 * time.Second, Logger: &nop})
	for _, want := range []string{"did not answer within the timeout (8s)", "no route to host",
		"nothing at 10.77.0.3:29500 answered", "MASTER_ADDR 10.77.0.3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank 1's error %v lacks %q", err, want)
		}
	}
}
