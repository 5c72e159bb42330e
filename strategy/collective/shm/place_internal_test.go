//go:build linux

package shm

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/rs/zerolog"
)

// boundRankEnv makes TestBoundRankChild one rank of a group opened by
// TestBoundRanksSpinForAPeerOnAnotherCore: "rank size port".
const boundRankEnv = "FULGUR_SHM_BOUND_RANK"

// TestBoundRanksSpinForAPeerOnAnotherCore: ranks started bound to one core
// each (as taskset and mpirun's default binding start them: one CPU in the
// mask, so runtime.NumCPU and GOMAXPROCS are 1) have a core each between
// them, and their barriers spin for a peer on the other core; two ranks
// bound to one core between them take turns on it, and do not.
func TestBoundRanksSpinForAPeerOnAnotherCore(t *testing.T) {
	cpus := testCPUs(t)
	if len(cpus) < 2 {
		t.Skipf("needs 2 CPUs to bind 2 ranks to a core each; this process may use %v", cpus)
	}
	for _, tc := range []struct {
		name  string
		cores [2]int
		want  time.Duration
	}{
		{"a core each", [2]int{cpus[0], cpus[1]}, spinFar},
		{"one core for both", [2]int{cpus[0], cpus[0]}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := openBound(t, tc.cores)
			for r, g := range got {
				if g.procs != 1 {
					t.Errorf("rank %d bound to core %d ran with GOMAXPROCS=%d, want 1: the child was not bound", r, tc.cores[r], g.procs)
				}
				if g.spinFar != tc.want {
					t.Errorf("rank %d bound to core %d (ranks on cores %v): spins %v for a peer on another core, want %v", r, tc.cores[r], tc.cores, g.spinFar, tc.want)
				}
			}
		})
	}
}

// TestSpinFarForCountsTheRanksCoresTogether: the policy on the CPU masks
// themselves, for placements no test host can give.
func TestSpinFarForCountsTheRanksCoresTogether(t *testing.T) {
	mask := func(cores ...int) []byte {
		m := make([]byte, cpuMaskBytes)
		for _, c := range cores {
			m[c/8] |= 1 << (c % 8)
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		masks [][]byte
		want  time.Duration
	}{
		{"2 ranks bound to cores 0 and 1", [][]byte{mask(0), mask(1)}, spinFar},
		{"2 ranks bound to cores 3 and 1000", [][]byte{mask(3), mask(1000)}, spinFar},
		{"2 ranks both bound to core 5", [][]byte{mask(5), mask(5)}, 0},
		{"2 ranks floating over 2 cores", [][]byte{mask(0, 1), mask(0, 1)}, spinFar},
		{"3 ranks floating over 2 cores", [][]byte{mask(0, 1), mask(0, 1), mask(0, 1)}, 0},
		{"4 ranks bound round robin to 2 cores", [][]byte{mask(0), mask(1), mask(0), mask(1)}, 0},
		{"4 ranks bound to 4 cores", [][]byte{mask(0), mask(1), mask(2), mask(3)}, spinFar},
	} {
		if got := spinFarFor(tc.masks); got != tc.want {
			t.Errorf("%s: spinFarFor = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBoundRankChild is one rank of TestBoundRanksSpinForAPeerOnAnotherCore
// when run as its child (boundRankEnv set); it does nothing otherwise.
func TestBoundRankChild(t *testing.T) {
	spec := os.Getenv(boundRankEnv)
	if spec == "" {
		return
	}
	var rank, size, port int
	if _, err := fmt.Sscanf(spec, "%d %d %d", &rank, &size, &port); err != nil {
		t.Fatalf("%s=%q: %v", boundRankEnv, spec, err)
	}
	nop := zerolog.Nop()
	cfg := rendezvous.Config{Rank: rank, Size: size, MasterAddr: "127.0.0.1", MasterPort: port, Token: "t",
		BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop}
	if rank == 0 {
		ln, err := net.FileListener(os.NewFile(3, "listener"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listener = ln
	}
	rv, err := rendezvous.Meet(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := open(context.Background(), rv)
	if err != nil {
		rv.Close()
		t.Fatal(err)
	}
	defer g.Close()
	fmt.Printf("BOUND procs=%d spinFar=%d\n", runtime.GOMAXPROCS(0), g.spinFar)
}

type boundRank struct {
	procs   int
	spinFar time.Duration
}

// openBound starts two child processes, rank r bound to cores[r] from its
// start, opens a group between them and returns what each reported.
func openBound(t *testing.T, cores [2]int) [2]boundRank {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lf, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	var cmds [2]*exec.Cmd
	var outs [2]*bufio.Scanner
	for r := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBoundRankChild$", "-test.v")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d 2 %d", boundRankEnv, r, port))
		if r == 0 {
			cmd.ExtraFiles = []*os.File{lf}
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := startBound(cmd, cores[r]); err != nil {
			t.Fatal(err)
		}
		cmds[r], outs[r] = cmd, bufio.NewScanner(out)
	}
	var got [2]boundRank
	for r, sc := range outs {
		var lines []string
		found := false
		for sc.Scan() {
			line := sc.Text()
			lines = append(lines, line)
			if rest, ok := strings.CutPrefix(line, "BOUND "); ok {
				var ns int64
				if _, err := fmt.Sscanf(rest, "procs=%d spinFar=%d", &got[r].procs, &ns); err != nil {
					t.Fatalf("rank %d: %q: %v", r, line, err)
				}
				got[r].spinFar = time.Duration(ns)
				found = true
			}
		}
		if err := cmds[r].Wait(); err != nil || !found {
			t.Fatalf("rank %d (bound to core %d): %v\n%s", r, cores[r], err, strings.Join(lines, "\n"))
		}
	}
	return got
}

// startBound starts cmd bound to one core from its first instruction: the
// child inherits the CPU mask of the thread that forks it.
func startBound(cmd *exec.Cmd, core int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	one.Set(core)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("bind to core %d: %v", core, err)
	}
	defer unix.SchedSetaffinity(0, &old)
	return cmd.Start()
}

// testCPUs lists the CPUs this process may run on.
func testCPUs(t *testing.T) []int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}
