package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Three ranks of examples/mlp started by hand, torchrun-style (as three
// machines' launchers would start them), one of them given something its
// machine cannot use: a checkpoint, a data directory that is not there,
// or a bad flag value. It fails before it joins; the others waited for it
// until FULGUR_TIMEOUT (minutes) and then said only that it never joined.
// Now it tells them through rank 0, and every rank's error names it, its
// host and its reason. FULGUR_TIMEOUT is far beyond the test's own limit:
// ranks that waited for it would be killed without the reason.
func TestRankFailingBeforeTheRendezvousEndsTheJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts training processes")
	}
	host, _ := os.Hostname()
	for _, tc := range []struct {
		name    string
		failing int
		args    func(root string) []string
		reason  string
	}{
		{"rank 2 lacks the checkpoint", 2, func(root string) []string { return []string{"-ckpt-path", filepath.Join(root, "node2", "last.ckpt")} }, "no such file or directory"},
		{"rank 1 lacks the data", 1, func(root string) []string { return []string{"-data", filepath.Join(root, "fashion")} }, filepath.Join("fashion")},
		{"rank 0 has a bad flag value", 0, func(string) []string { return []string{"-batch-size", "0"} }, "-batch-size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			const world = 3
			args := []string{"-devices", strconv.Itoa(world), "-strategy", "ddp", "-max-steps", "1", "-limit-train-batches", "1",
				"-limit-val-batches", "1", "-limit-test-batches", "1", "-no-progress-bar", "-root-dir", root}
			errs := make([]string, world)
			codes := make([]int, world)
			var wg sync.WaitGroup
			for rank := range world {
				a := args
				if rank == tc.failing {
					a = append(append([]string{}, args...), tc.args(root)...)
				}
				cmd := exec.CommandContext(ctx, os.Args[0], a...)
				cmd.Env = append(os.Environ(), programEnv+"=1", mlpProgramEnv+"=1", "FULGUR_TIMEOUT=10m", "FULGUR_TOKEN=abortjoin",
					"RANK="+strconv.Itoa(rank), "LOCAL_RANK="+strconv.Itoa(rank), "WORLD_SIZE="+strconv.Itoa(world),
					"LOCAL_WORLD_SIZE="+strconv.Itoa(world), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := cmd.Run()
					var ee *exec.ExitError
					if errors.As(err, &ee) {
						codes[rank] = ee.ExitCode()
					} else if err != nil {
						codes[rank] = -1
					}
					errs[rank] = stderr.String()
				}()
			}
			wg.Wait()
			if ctx.Err() != nil {
				t.Fatalf("the ranks still ran after 90 s (waiting for rank %d until FULGUR_TIMEOUT?):\nrank 0: %s\nrank 1: %s\nrank 2: %s", tc.failing, errs[0], errs[1], errs[2])
			}
			verdict := fmt.Sprintf("rank %d on host %s failed before the job met: ", tc.failing, host)
			for rank := range world {
				if codes[rank] != 1 {
					t.Errorf("rank %d exited %d, want 1:\n%s", rank, codes[rank], errs[rank])
				}
				if !strings.Contains(errs[rank], tc.reason) {
					t.Errorf("rank %d's output lacks rank %d's reason %q:\n%s", rank, tc.failing, tc.reason, errs[rank])
				}
				if rank != tc.failing && !strings.Contains(errs[rank], verdict) {
					t.Errorf("rank %d's output lacks %q:\n%s", rank, verdict, errs[rank])
				}
			}
		})
	}
}
