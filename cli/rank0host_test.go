package cli_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/deploy/netns"
)

// Two ranks of examples/mlp on two "machines" (deploy/netns's network
// namespaces), stopped mid-training by rank 0 (its context cancelled, as
// Ctrl-C does): rank 0 saves interrupted.ckpt in its run directory, on
// its machine. Rank 1 said "checkpoint saved to PATH" too, a path that on
// its own machine did not exist; now it says whose host holds it. Rank
// 0's message is unchanged.
func TestInterruptedRankElsewhereNamesRankZerosHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts training processes")
	}
	if os.Geteuid() != 0 {
		t.Skip("runs the ranks in two network namespaces (deploy/netns), which needs root (CI runs as root)")
	}
	p, err := netns.Up(netns.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	root := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"-devices", "1", "-num-nodes", "2", "-strategy", "ddp", "-max-steps", "50", "-limit-val-batches", "1",
		"-limit-test-batches", "1", "-no-progress-bar", "-root-dir", root}
	errs := make([]string, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		argv := append(append(p.Exec(rank), os.Args[0]), args...)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), programEnv+"=1", mlpProgramEnv+"=1", "FULGUR_TIMEOUT=60s", "FULGUR_TOKEN=rank0host",
			"RANK="+strconv.Itoa(rank), "LOCAL_RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=1", "NODE_RANK="+strconv.Itoa(rank),
			"MASTER_ADDR="+p.Addr[0], "MASTER_PORT=29518", "FULGUR_SOCKET_IFNAME="+p.Dev[rank])
		if rank == 0 {
			cmd.Env = append(cmd.Env, cancelAtEnv+"=3")
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd.Run()
			errs[rank] = stderr.String()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the ranks still ran after 2 minutes:\nrank 0: %s\nrank 1: %s", errs[0], errs[1])
	}
	host, _ := os.Hostname()
	ckpt := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "interrupted.ckpt")
	if _, err := os.Stat(ckpt); err != nil {
		t.Fatalf("rank 0 saved no %s: %v\nrank 0: %s", ckpt, err, errs[0])
	}
	saved := "checkpoint saved to " + ckpt
	if !strings.Contains(errs[0], saved+"; resume with:") {
		t.Errorf("rank 0's output lacks %q followed by the command:\n%s", saved+"; resume with:", errs[0])
	}
	t.Logf("rank 1 ends with: %s", lastLine(errs[1]))
	if want := saved + " on rank 0's host " + host + " ("; !strings.Contains(errs[1], want) {
		t.Errorf("rank 1's output lacks %q:\n%s", want, errs[1])
	}
}
