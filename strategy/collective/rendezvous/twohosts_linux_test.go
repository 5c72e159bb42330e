package rendezvous_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/rs/zerolog"
)

// twoHostsEnv, set in a child process, holds "RANK MASTER_ADDR": the
// child is that rank of TestRankZeroRefusesAMasterAddrNamingTheJoinersMachine, in
// one of the two network namespaces the parent made.
const twoHostsEnv = "FULGUR_TEST_TWO_HOSTS"

// Node 0's launcher started without -master-addr (127.0.0.1), or with
// another machine's address, while the other machines name node 0: the
// ranks reach rank 0, which listens on every address, but rank 0 announces
// its MASTER_ADDR as its data address, an address of the joiner's own
// machine. Rank 0 says so at once, and tells the joiner, naming the
// MASTER_ADDR to give, instead of each failing its data connections
// ("connection refused" at the joiner's own address, "connection reset" at
// rank 0). Two network namespaces joined by a veth pair stand
// for two machines (10.77.0.1 and 10.77.0.2); no packet leaves them.
func TestRankZeroRefusesAMasterAddrNamingTheJoinersMachine(t *testing.T) {
	if v := os.Getenv(twoHostsEnv); v != "" {
		var rank int
		var master string
		if _, err := fmt.Sscan(v, &rank, &master); err != nil {
			t.Fatal(err)
		}
		nop := zerolog.Nop()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rv, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: rank, Size: 2, MasterAddr: master, MasterPort: 29500,
			Token: "t", Timeout: 10 * time.Second, Logger: &nop})
		if rv != nil {
			rv.Close()
		}
		fmt.Printf("rank %d: %v\n", rank, err) // the parent reads it
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("making network namespaces needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("ip (iproute2) is needed to make network namespaces: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(os.Getpid())
	ns := []string{"fgrz" + id + "n0", "fgrz" + id + "n1"}
	t.Cleanup(func() {
		for _, n := range ns {
			exec.Command("ip", "netns", "del", n).Run()
		}
	})
	for _, c := range [][]string{
		{"netns", "add", ns[0]}, {"netns", "add", ns[1]},
		{"link", "add", "fgrz" + id + "a", "netns", ns[0], "type", "veth", "peer", "name", "fgrz" + id + "b", "netns", ns[1]},
		{"-n", ns[0], "addr", "add", "10.77.0.1/24", "dev", "fgrz" + id + "a"},
		{"-n", ns[1], "addr", "add", "10.77.0.2/24", "dev", "fgrz" + id + "b"},
		{"-n", ns[0], "link", "set", "fgrz" + id + "a", "up"}, {"-n", ns[1], "link", "set", "fgrz" + id + "b", "up"},
		{"-n", ns[0], "link", "set", "lo", "up"}, {"-n", ns[1], "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	for _, rank0Master := range []string{"127.0.0.1", "10.77.0.2"} {
		t.Run("rank 0 with MASTER_ADDR "+rank0Master, func(t *testing.T) {
			outs := make([]chan string, 2)
			for r, master := range []string{rank0Master, "10.77.0.1"} {
				outs[r] = make(chan string, 1)
				cmd := exec.Command("ip", "netns", "exec", ns[r], exe, "-test.run", "^"+t.Name()[:strings.Index(t.Name(), "/")]+"$", "-test.count", "1")
				cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s", twoHostsEnv, r, master))
				go func() {
					out, err := cmd.CombinedOutput()
					outs[r] <- fmt.Sprintf("%s(exit: %v)", out, err)
				}()
			}
			zero, one := <-outs[0], <-outs[1]
			// Rank 0 sees the mistake first, ends, and tells rank 1 why.
			for r, out := range []string{zero, one} {
				for _, want := range []string{fmt.Sprintf("rank %d: rendezvous: rank %d: ", r, r), "rank 1 joined from another machine",
					"reached rank 0 at 10.77.0.1:29500", "rank 0 was started with MASTER_ADDR " + rank0Master, "the same MASTER_ADDR", "10.77.0.1 here"} {
					if !strings.Contains(out, want) {
						t.Errorf("rank %d lacks %q:\n%s", r, want, out)
					}
				}
			}
			t.Logf("rank 0: %s\nrank 1: %s", zero, one)
		})
	}
}
