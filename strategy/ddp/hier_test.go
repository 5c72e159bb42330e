package ddp_test

import (
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// startNodes runs the test program as a job of nodes x perNode processes
// that a launcher such as torchrun would start on each node (RANK,
// NODE_RANK, ... set; here every node is this host), and returns each
// rank's run.
func startNodes(t *testing.T, marker string, nodes, perNode int, env []string, args ...string) []run {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	world := nodes * perNode
	runs := make([]run, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			runs[r] = startProgram(t, marker, append([]string{"FULGUR_TIMEOUT=20s",
				fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", world), fmt.Sprintf("LOCAL_RANK=%d", r%perNode),
				fmt.Sprintf("LOCAL_WORLD_SIZE=%d", perNode), fmt.Sprintf("NODE_RANK=%d", r/perNode),
				"MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port), "FULGUR_TOKEN=" + marker}, env...), args...)
		})
	}
	wg.Wait()
	return runs
}

// TestDDPHierarchicalTwoNodes trains 2 nodes x 2 ranks over
// FULGUR_BACKEND=hier (shared memory inside a node, tcp across) and over a
// flat tcp ring: the same steps and, within float32 rounding (the sums run
// in another order), the same weights as 4 in-process ranks.
func TestDDPHierarchicalTwoNodes(t *testing.T) {
	needLinux(t)
	want := inProcess(t, 4)
	args := []string{"-strategy", "ddp", "-devices", "2", "-num-nodes", "2"}
	for _, backend := range []string{"hier", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			marker := newMarker(t)
			runs := startNodes(t, marker, 2, 2, []string{"FULGUR_BACKEND=" + backend, "FULGUR_BUCKET_MB=0.0001"}, args...)
			for r, run := range runs {
				if run.err != nil {
					t.Fatalf("rank %d: %v\n%s", r, run.err, lastLines(run.stderr, 5))
				}
			}
			got := parseResult(t, runs[0].stdout)
			if got.WorldSize != 4 || got.GlobalStep != want.GlobalStep || len(got.Params) != len(want.Params) {
				t.Fatalf("result %+v, in-process %+v", got, want)
			}
			worst := 0.0
			for i, v := range got.Params {
				w := float64(want.Params[i])
				worst = max(worst, math.Abs(float64(v)-w)/max(math.Abs(w), 1e-3))
			}
			if worst > 1e-4 {
				t.Errorf("weights differ from the in-process ranks' by up to %.2g (relative)", worst)
			}
			if math.Abs(got.ValLoss-want.ValLoss) > 1e-4*math.Abs(want.ValLoss) {
				t.Errorf("val_loss %v, in-process %v", got.ValLoss, want.ValLoss)
			}
			if left := survivors(t, marker); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
			t.Logf("largest relative difference from in-process: %.2g; rank 0 took %v", worst, runs[0].took)
		})
	}
}

// TestDDPHierarchicalKilledRank: a rank of the second node dies mid-step;
// every other rank, on both nodes, fails within a second or so of its exit
// (not at FULGUR_TIMEOUT) naming it, with the two-level group's error (which also
// shows that FULGUR_BACKEND=hier built one for 2 nodes on one host).
func TestDDPHierarchicalKilledRank(t *testing.T) {
	needLinux(t)
	marker := newMarker(t)
	runs := startNodes(t, marker, 2, 2, []string{"FULGUR_BACKEND=hier"},
		"-strategy", "ddp", "-devices", "2", "-num-nodes", "2", "-die-rank", "3", "-die-batch", "3")
	for r, run := range runs[:3] {
		if run.err == nil {
			t.Errorf("rank %d succeeded although rank 3 died", r)
			continue
		}
		if !strings.Contains(run.stderr, "collective/hier") {
			t.Errorf("rank %d's error does not come from the two-level group:\n%s", r, lastLines(run.stderr, 3))
		}
		if !strings.Contains(run.stderr, "rank 3") {
			t.Errorf("rank %d's error does not name rank 3:\n%s", r, lastLines(run.stderr, 3))
		}
		// Counted from rank 3's exit, not from the start: a loaded machine
		// (CI beside other builds) takes seconds to start four programs.
		if d := run.ended.Sub(runs[3].ended); d > 10*time.Second {
			t.Errorf("rank %d failed %v after rank 3 exited (FULGUR_TIMEOUT is 20s)", r, d)
		}
		t.Logf("rank %d after %v, %v after rank 3 exited: %s", r, run.took.Round(time.Millisecond), run.ended.Sub(runs[3].ended).Round(time.Millisecond), lastLines(run.stderr, 1))
	}
	if left := survivors(t, marker); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
}
