package launch_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// childEnv makes the test binary act as a worker: "env" prints its launch
// variables, "exit:N" exits with N, "sleep" waits to be killed, "parent"
// starts a sleeping worker, prints its pid and kills itself.
const childEnv = "LAUNCH_TEST_CHILD"

func TestMain(m *testing.M) {
	switch mode := os.Getenv(childEnv); {
	case mode == "":
		os.Exit(m.Run())
	case mode == "env":
		// One write per child: two children share the collecting buffer,
		// and a write of one short line to a pipe is not interleaved.
		var line strings.Builder
		for _, k := range []string{launch.EnvRank, launch.EnvWorldSize, launch.EnvLocalRank, launch.EnvMasterPort, launch.EnvToken, launch.EnvLauncher, "KEEP"} {
			fmt.Fprintf(&line, "%s=%s ", k, os.Getenv(k))
		}
		line.WriteString("\n")
		os.Stdout.WriteString(line.String())
		os.Exit(0)
	case strings.HasPrefix(mode, "exit:"):
		n, _ := strconv.Atoi(strings.TrimPrefix(mode, "exit:"))
		os.Exit(n)
	case mode == "sleep":
		select {}
	case strings.HasPrefix(mode, "elastic:"):
		elasticChild(strings.TrimPrefix(mode, "elastic:"))
	case mode == "parent":
		g, err := launch.Start(context.Background(), launch.Config{Ranks: []int{1}, Args: []string{},
			Env: func(int) []string { return []string{childEnv + "=sleep"} }})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(g.Pids()[0])
		p, _ := os.FindProcess(os.Getpid())
		p.Signal(os.Kill)
		select {}
	}
}

func TestStartSetsLaunchVariables(t *testing.T) {
	local := launch.Local{World: 3, MasterPort: 29999, Token: "secret", Launcher: "ddp"}
	var out lockedBuffer
	t.Setenv(launch.EnvRank, "7") // a stale value the child must not see
	t.Setenv("KEEP", "yes")
	g, err := launch.Start(context.Background(), launch.Config{Ranks: []int{1, 2}, Args: []string{}, Stdout: &out,
		Env: func(r int) []string { return append(local.RankEnv(r), childEnv+"=env") }})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"1", "2"} {
		want := "RANK=" + r + " WORLD_SIZE=3 LOCAL_RANK=" + r + " MASTER_PORT=29999 FULGUR_TOKEN=secret FULGUR_LAUNCHER=ddp KEEP=yes"
		if !strings.Contains(out.String(), want) {
			t.Errorf("rank %s: output %q lacks %q", r, out.String(), want)
		}
	}
}

// lockedBuffer collects the output of several children at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestWaitNamesFailedRanks(t *testing.T) {
	g, err := launch.Start(context.Background(), launch.Config{Ranks: []int{1, 2, 3}, Args: []string{},
		Env: func(r int) []string {
			if r == 2 {
				return []string{childEnv + "=exit:3"}
			}
			return []string{childEnv + "=exit:0"}
		}})
	if err != nil {
		t.Fatal(err)
	}
	err = g.Wait(context.Background())
	if err == nil || !strings.Contains(err.Error(), "rank 2 (pid") || !strings.Contains(err.Error(), "exited with status 3") || strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("Wait error = %v, want one naming rank 2 and status 3 only", err)
	}
}

func TestCancelKillsRanks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	g, err := launch.Start(ctx, launch.Config{Ranks: []int{1, 2}, Args: []string{},
		Env: func(int) []string { return []string{childEnv + "=sleep"} }})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-g.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("ranks still running 20s after the context was cancelled")
	}
	if err := g.Err(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Err = %v, want the ranks reported killed", err)
	}
}

// TestWorkerDiesWithParent starts a parent that starts a worker and then
// kills itself with SIGKILL: the kernel must kill the worker too.
func TestWorkerDiesWithParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("PDEATHSIG is Linux only")
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=parent")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the parent printed no worker pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("parent said %q", line)
	}
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscallKill(pid)
			t.Fatalf("worker %d outlived its parent by 10s", pid)
		}
		time.Sleep(20 * time.Millisecond) // polling another process
	}
}

// alive reports whether pid runs (a zombie waiting for its reaper is dead).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func syscallKill(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}

func TestResultRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, r := range []*launch.Result{
		{Layout: []string{"w:0:3"}, Metrics: map[string]float64{"val_loss": 0.25}, Stats: map[string]float64{"epochs": 2}, SHA256: "abc", Data32: []float32{1, -2.5, 3e-8}},
		{Layout: []string{"w:0:2"}, Notes: map[string]string{"stopped_early": "patience"}, Data64: []float64{1e300, -0.0}},
	} {
		path := filepath.Join(dir, "result")
		if err := launch.WriteResult(path, r); err != nil {
			t.Fatal(err)
		}
		got, err := launch.ReadResult(path)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(r) {
			t.Errorf("read back %+v, wrote %+v", got, r)
		}
	}
	if _, err := launch.ReadResult(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "wrote no result") {
		t.Errorf("missing result: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("fulgurR1\x05\x00\x00\x00{}"), 0o600)
	if _, err := launch.ReadResult(bad); err == nil {
		t.Error("a truncated result was accepted")
	}
	if err := launch.WriteResult(filepath.Join(dir, "no", "such", "dir"), &launch.Result{}); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

// MASTER_PORT chooses the local rendezvous port; one another process holds
// is an error naming the port and the variable, and a bad value names it.
func TestLoopbackHonoursMasterPort(t *testing.T) {
	free, err := launch.MasterPortFromEnv(func(string) (string, bool) { return "", false })
	if err != nil || free != 0 {
		t.Fatalf("unset MASTER_PORT gave %d, %v; want 0 (pick a free port)", free, err)
	}
	ln, port, err := launch.Loopback(0)
	if err != nil {
		t.Fatal(err)
	}
	held := port
	got, err := launch.MasterPortFromEnv(func(k string) (string, bool) { return strconv.Itoa(held), k == "MASTER_PORT" })
	if err != nil || got != held {
		t.Fatalf("MASTER_PORT=%d gave %d, %v", held, got, err)
	}
	if _, _, err := launch.Loopback(held); err == nil || !strings.Contains(err.Error(), "MASTER_PORT="+strconv.Itoa(held)) || !strings.Contains(err.Error(), "free port") {
		t.Errorf("Loopback on a held port: %v, want an error naming MASTER_PORT=%d and the fix", err, held)
	}
	ln.Close()
	ln2, p2, err := launch.Loopback(held)
	if err != nil || p2 != held {
		t.Fatalf("Loopback(%d) once free: port %d, %v", held, p2, err)
	}
	ln2.Close()
	for _, bad := range []string{"http", "0", "70000"} {
		if _, err := launch.MasterPortFromEnv(func(string) (string, bool) { return bad, true }); err == nil || !strings.Contains(err.Error(), "MASTER_PORT=\""+bad+"\"") {
			t.Errorf("MASTER_PORT=%q: %v, want an error naming it", bad, err)
		}
	}
}
