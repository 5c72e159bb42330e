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
