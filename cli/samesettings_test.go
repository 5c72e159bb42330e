package cli_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Two ranks of examples/mlp started by hand, torchrun-style (as two
// machines' launchers would start them), one with a flag the other lacks: a batch size with as
// many batches (-limit-train-batches), or a learning rate, trained before
// without an error, each rank with its own setting and the replicas
// drifting apart. Now both fail before training, naming the flag and both
// values. A model of another width failed on a mismatched broadcast that
// did not say why.
func TestRanksWithDifferentFlagsFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts training processes")
	}
	const differ = "the ranks were started with different settings"
	for _, tc := range []struct {
		name  string
		rank1 []string
		want  []string
	}{
		{"batch size", []string{"-batch-size", "8"}, []string{differ, "-batch-size is 8 on rank 1, 64 on rank 0"}},
		{"learning rate", []string{"-lr", "0.5"}, []string{differ, "-lr is 0.5 on rank 1, 0.001 on rank 0"}},
		// The broadcast of rank 0's weights in setup, before the settings
		// are compared, meets the other model: it says so.
		{"model size", []string{"-sizes", "784,32,10"}, []string{"ranks disagree on the operation", "the ranks built models of different sizes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := []string{"-devices", "2", "-strategy", "ddp", "-max-steps", "2", "-limit-train-batches", "2",
				"-limit-val-batches", "1", "-limit-test-batches", "1", "-no-progress-bar", "-root-dir", root}
			errs := make([]string, 2)
			codes := make([]int, 2)
			var wg sync.WaitGroup
			for rank := range 2 {
				a := args
				if rank == 1 {
					a = append(append([]string{}, args...), tc.rank1...)
				}
				cmd := exec.CommandContext(ctx, os.Args[0], a...)
				cmd.Env = append(os.Environ(), programEnv+"=1", mlpProgramEnv+"=1", "FULGUR_TIMEOUT=60s", "FULGUR_TOKEN=samesettings",
					"RANK="+strconv.Itoa(rank), "LOCAL_RANK="+strconv.Itoa(rank), "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2",
					"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
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
				t.Fatalf("the ranks still ran after 2 minutes:\nrank 0: %s\nrank 1: %s", errs[0], errs[1])
			}
			for rank := range 2 {
				if codes[rank] == 0 {
					t.Errorf("rank %d exited 0: it trained with settings the other rank does not share", rank)
				}
				for _, want := range tc.want {
					if !strings.Contains(errs[rank], want) {
						t.Errorf("rank %d's output lacks %q:\n%s", rank, want, errs[rank])
					}
				}
			}
		})
	}
}
