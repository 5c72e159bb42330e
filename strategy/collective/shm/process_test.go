//go:build linux

package shm_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/shm"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
	"github.com/rs/zerolog"
)

// Worker mode: the test binary re-executed as one rank of a real
// multi-process group.
const workerEnv = "FULGUR_COLLECTIVE_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(worker())
	}
	os.Exit(m.Run())
}

func worker() int {
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	size, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	port, _ := strconv.Atoi(os.Getenv("MASTER_PORT"))
	nop := zerolog.Nop()
	cfg := rendezvous.Config{Rank: rank, Size: size, MasterAddr: "127.0.0.1", MasterPort: port, Token: os.Getenv(rendezvous.TokenEnv),
		BindAddr: "127.0.0.1", Timeout: time.Minute, Logger: &nop}
	if rank == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		cfg.Listener = ln
		fmt.Println("PORT", ln.Addr().(*net.TCPAddr).Port)
	}
	ctx := context.Background()
	rv, err := rendezvous.Meet(ctx, cfg)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	var g collective.Group
	if os.Getenv("BACKEND") == "shm" {
		g, err = shm.New(ctx, rv)
	} else {
		g, err = tcp.NewGroup(ctx, rv)
	}
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	if g, err = splitIfAsked(ctx, g); err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	if n, _ := strconv.Atoi(os.Getenv(latePeerEnv)); n > 0 {
		return latePeer(ctx, g, n)
	}
	buf := make([]float32, 2<<20)
	for i := 0; i < 100000; i++ {
		if err := g.AllReduce(ctx, buf, collective.Sum); err != nil {
			p, _ := collective.PeerOf(err)
			fmt.Printf("FAILED blame=%d %v\n", p, err)
			return 2
		}
		if i == 3 {
			fmt.Println("RUNNING")
		}
	}
	fmt.Println("FINISHED")
	return 0
}

type proc struct {
	cmd *exec.Cmd
	out *bufio.Scanner
	log strings.Builder
}

func (p *proc) line(prefix string) (string, error) {
	for p.out.Scan() {
		l := p.out.Text()
		p.log.WriteString(l + "\n")
		if strings.HasPrefix(l, prefix) {
			return l, nil
		}
	}
	return "", fmt.Errorf("no %q line; output:\n%s", prefix, p.log.String())
}

// startRanks starts n worker processes of this test binary, each given
// env besides its rank, and returns them once every one is started.
// Whatever still runs is killed when the test ends.
func startRanks(ctx context.Context, tb testing.TB, n int, env ...string) []*proc {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	procs := make([]*proc, n)
	tb.Cleanup(func() { // no orphans, whatever happened
		for _, p := range procs {
			if p != nil && p.cmd.ProcessState == nil {
				p.cmd.Process.Kill()
				p.cmd.Wait()
			}
		}
	})
	start := func(rank, port int) {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(append(os.Environ(), workerEnv+"=1", rendezvous.TokenEnv+"=k",
			"RANK="+strconv.Itoa(rank), "WORLD_SIZE="+strconv.Itoa(n), "MASTER_PORT="+strconv.Itoa(port)), env...)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			tb.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		procs[rank] = &proc{cmd: cmd, out: bufio.NewScanner(stdout)}
	}
	start(0, 0)
	l, err := procs[0].line("PORT")
	if err != nil {
		tb.Fatal(err)
	}
	port, _ := strconv.Atoi(strings.Fields(l)[1])
	for r := 1; r < n; r++ {
		start(r, port)
	}
	return procs
}

// killOneRank starts n worker processes of this test binary (each given
// env besides its rank), waits until every one streams all-reduces,
// SIGKILLs rank victim and returns the processes, the others still
// running, and when the kill was sent. Whatever still runs is killed when
// the test ends.
func killOneRank(ctx context.Context, t *testing.T, n, victim int, env ...string) ([]*proc, time.Time) {
	t.Helper()
	procs := startRanks(ctx, t, n, env...)
	for r, p := range procs {
		if _, err := p.line("RUNNING"); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	killed := time.Now()
	if err := procs[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	procs[victim].cmd.Wait()
	return procs, killed
}

// TestKillRankProcess runs a real multi-process group, SIGKILLs one rank in
// the middle of a stream of 8 MB all-reduces, and checks that every other
// rank exits with an error naming it, well before the 1 minute peer timeout.
func TestKillRankProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped with -short")
	}
	for _, backend := range []string{"tcp", "shm"} {
		for _, victim := range []int{0, 2} {
			t.Run(fmt.Sprintf("%s/kill=%d", backend, victim), func(t *testing.T) {
				const n = 3
				ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
				defer cancel()
				procs, killed := killOneRank(ctx, t, n, victim, "BACKEND="+backend)
				for r, p := range procs {
					if r == victim {
						continue
					}
					l, lerr := p.line("FAILED")
					io.Copy(io.Discard, p.cmd.Stdout.(io.Reader))
					werr := p.cmd.Wait()
					var exit *exec.ExitError
					if !errors.As(werr, &exit) || exit.ExitCode() != 2 {
						t.Errorf("rank %d: exit %v, want status 2 (error reported); output:\n%s", r, werr, p.log.String())
						continue
					}
					if lerr != nil || !strings.HasPrefix(l, fmt.Sprintf("FAILED blame=%d ", victim)) {
						t.Errorf("rank %d: %q, want an error blaming rank %d", r, l, victim)
					}
					t.Logf("rank %d: %s", r, l)
				}
				if ctx.Err() != nil {
					t.Fatalf("ranks hung: killed by the test's deadline")
				}
				t.Logf("survivors exited %v after the kill", time.Since(killed))
			})
		}
	}
}
