package rendezvous_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/rs/zerolog"
)

// A MasterPort that another process holds fails rank 0 at once with an
// error naming the port and the variable to change, not a timeout.
func TestMasterPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	nop := zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = rendezvous.Meet(ctx, rendezvous.Config{Rank: 0, Size: 2, MasterAddr: "127.0.0.1", MasterPort: port,
		Token: "t", BindAddr: "127.0.0.1", Timeout: 5 * time.Second, Logger: &nop})
	if err == nil {
		t.Fatal("rank 0 met on a port another listener holds")
	}
	for _, want := range []string{"port " + strconv.Itoa(port), "MASTER_PORT", "address already in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

// rankZeroOfThree starts rank 0 of a world of 3 with a 1 s timeout on a
// free loopback port, and returns the port and where Meet's error goes.
func rankZeroOfThree(t *testing.T, ctx context.Context) (int, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	nop := zerolog.Nop()
	zero := make(chan error, 1)
	go func() {
		_, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 0, Size: 3, MasterAddr: "127.0.0.1", MasterPort: port, Listener: ln,
			Token: "t", BindAddr: "127.0.0.1", Timeout: time.Second, Logger: &nop})
		zero <- err
	}()
	return port, zero
}

// When a rank never comes, rank 0 gives up after its timeout; the ranks
// that did join learn why from rank 0 (the missing rank), instead of a bare
// EOF that a launcher would report as their own failure.
func TestJoinedRanksLearnWhoNeverCame(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port, zero := rankZeroOfThree(t, ctx)
	nop := zerolog.Nop()
	_, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 3, MasterAddr: "127.0.0.1", MasterPort: port,
		Token: "t", BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop})
	if err == nil {
		t.Fatal("rank 1 met a world of 3 without rank 2")
	}
	for _, want := range []string{"rank 0", "ranks [2] did not join within the timeout (1s)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("rank 1's error %q does not contain %q", err, want)
		}
	}
	if err := <-zero; err == nil || !strings.Contains(err.Error(), "ranks [2] did not join") {
		t.Errorf("rank 0's error %v, want one naming rank 2", err)
	}
}

// A rank started with another world size is refused; when rank 0 then
// times out, its error says why that rank never joined (on rank 0's
// machine the refused rank's own message is elsewhere).
func TestTimeoutNamesRefusedRank(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port, zero := rankZeroOfThree(t, ctx)
	nop := zerolog.Nop()
	_, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 2, MasterAddr: "127.0.0.1", MasterPort: port,
		Token: "t", BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop})
	for _, want := range []string{"rank 1 says the world has 2 ranks, rank 0 says 3", "the same WORLD_SIZE", "the same -nnodes and -nproc on every machine"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank 1's error %v lacks %q", err, want)
		}
	}
	err = <-zero
	for _, want := range []string{"ranks [1 2] did not join", "rank 1 says the world has 2 ranks, rank 0 says 3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank 0's error %v lacks %q", err, want)
		}
	}
}
