package ddp_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
)

func lookupOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func torchrun(rank, world int, extra ...string) map[string]string {
	m := map[string]string{
		"RANK": fmt.Sprint(rank), "WORLD_SIZE": fmt.Sprint(world), "LOCAL_RANK": fmt.Sprint(rank % 2), "LOCAL_WORLD_SIZE": "2",
		"NODE_RANK": fmt.Sprint(rank / 2), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", "FULGUR_TOKEN": "t",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func TestDDPJoinsFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strategy string
		env      map[string]string
		devices  int
		nodes    int
		rank     int
		world    int
		err      string
	}{
		{"torchrun", "ddp", torchrun(3, 4), 2, 2, 3, 4, ""},
		{"defaults trust the launcher", "ddp", torchrun(1, 4), 1, 1, 1, 4, ""},
		{"openmpi", "ddp", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "FULGUR_TOKEN": "t"}, 2, 1, 1, 2, ""},
		{"slurm", "sharded", map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "n[1-2]", "FULGUR_TOKEN": "t"}, 2, 2, 2, 4, ""},
		{"spawn under a launcher joins", "ddp_spawn", torchrun(0, 2), 2, 1, 0, 2, ""},
		{"size disagrees", "ddp", torchrun(0, 4), 3, 1, 0, 0, "the torchrun launcher started 4 processes, but Devices × NumNodes is 3 × 1 = 3"},
		// fulgur run -nproc 3 ./train -devices 2 used to be blamed on torchrun.
		{"size disagrees under fulgur run", "ddp", torchrun(0, 3, "FULGUR_LAUNCHER", "elastic"), 2, 1, 0, 0, "fulgur run started 3 processes, but Devices × NumNodes is 2 × 1 = 2"},
		{"bad backend", "ddp", torchrun(0, 2, "FULGUR_BACKEND", "nccl2"), 2, 1, 0, 0, "FULGUR_BACKEND=\"nccl2\": use auto, tcp, shm, hier"},
		{"inproc between processes", "ddp", torchrun(0, 2, "FULGUR_BACKEND", "inproc"), 2, 1, 0, 0, "joins goroutines, not processes"},
		{"bad bucket", "ddp", torchrun(0, 2, "FULGUR_BUCKET_MB", "-1"), 2, 1, 0, 0, "FULGUR_BUCKET_MB=\"-1\""},
		{"bad overlap", "ddp", torchrun(0, 2, "FULGUR_DDP_OVERLAP", "sometimes"), 2, 1, 0, 0, "FULGUR_DDP_OVERLAP=\"sometimes\": use 1"},
		{"overlap off", "ddp", torchrun(1, 2, "FULGUR_DDP_OVERLAP", "0"), 2, 1, 1, 2, ""},
		{"bad timeout", "ddp", torchrun(0, 2, "FULGUR_TIMEOUT", "soon"), 2, 1, 0, 0, "FULGUR_TIMEOUT=\"soon\""},
		{"bad rank", "ddp", torchrun(5, 4), 2, 2, 0, 0, "rank 5 is outside"},
		{"socket interface", "ddp", torchrun(1, 2, "FULGUR_SOCKET_IFNAME", "lo"), 2, 1, 1, 2, ""},
		{"unknown socket interface", "ddp", torchrun(0, 2, "FULGUR_SOCKET_IFNAME", "nosuch9"), 2, 1, 0, 0, "FULGUR_SOCKET_IFNAME=\"nosuch9\": no such network interface on this host (it has lo"},
		// PyTorch users' variable is read when fulgur's is unset, never
		// ignored: a wrong name is an error naming it.
		{"gloo socket interface", "ddp", torchrun(1, 2, "GLOO_SOCKET_IFNAME", "lo"), 2, 1, 1, 2, ""},
		{"unknown gloo socket interface", "ddp", torchrun(0, 2, "GLOO_SOCKET_IFNAME", "nosuch9"), 2, 1, 0, 0, "GLOO_SOCKET_IFNAME=\"nosuch9\": no such network interface on this host (it has lo"},
		// Gloo takes a list of interfaces; fulgur one, and says so
		// (the error listed the first name as present).
		{"gloo's list of interfaces", "ddp", torchrun(0, 2, "GLOO_SOCKET_IFNAME", "lo,lo"), 2, 1, 0, 0, "GLOO_SOCKET_IFNAME=\"lo,lo\" is a list: fulgur listens on one interface; give one name, such as GLOO_SOCKET_IFNAME=lo"},
		{"fulgur's socket interface wins over gloo's", "ddp", torchrun(1, 2, "FULGUR_SOCKET_IFNAME", "lo", "GLOO_SOCKET_IFNAME", "nosuch9"), 2, 1, 1, 2, ""},
		{"nodes without launcher", "ddp", map[string]string{}, 2, 2, 0, 0, "not started by a launcher"},
		{"nodes without launcher: the command that launches them", "ddp", map[string]string{"NODE_RANK": "1"}, 2, 3, 0, 0, "fulgur run -nnodes 3 -node-rank <the node's index> -nproc 2 -master-addr"},
		{"bad master port, self-launched", "ddp", map[string]string{"MASTER_PORT": "http"}, 2, 1, 0, 0, "MASTER_PORT=\"http\""},
		{"bad master port, spawn", "ddp_spawn", map[string]string{"MASTER_PORT": "-3"}, 2, 1, 0, 0, "MASTER_PORT=\"-3\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := strategy.New(tc.strategy, strategy.Options{Devices: tc.devices, NumNodes: tc.nodes, Lookup: lookupOf(tc.env)})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Info().Rank != tc.rank || s.Info().WorldSize != tc.world || s.Info().GlobalZero != (tc.rank == 0) || s.Info().Name != tc.strategy {
				t.Errorf("%s: rank %d of %d (global zero %v), want %d of %d", s.Info().Name, s.Info().Rank, s.Info().WorldSize, s.Info().GlobalZero, tc.rank, tc.world)
			}
		})
	}
}

// TestDDPTwoNodesOverLoopback starts four processes as a launcher on two
// nodes would (torchrun variables, node ranks 0 and 1, two local ranks
// each), all on this machine, and checks the weights equal four in-process
// ranks'.
// A self-launched job's local rendezvous listens on MASTER_PORT when it is
// set; one another process holds fails Launch naming the port and variable.
func TestSelfLaunchHonoursMasterPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := fmt.Sprint(taken.Addr().(*net.TCPAddr).Port)
	s, err := strategy.New("ddp", strategy.Options{Devices: 2, NumNodes: 1, Lookup: lookupOf(map[string]string{"MASTER_PORT": port})})
	if err != nil {
		t.Fatal(err)
	}
	l, ok := s.(interface {
		Launch(context.Context) (bool, error)
	})
	if !ok {
		t.Fatalf("%T has no Launch", s)
	}
	if _, err := l.Launch(context.Background()); err == nil || !strings.Contains(err.Error(), "MASTER_PORT="+port) {
		t.Fatalf("Launch with MASTER_PORT=%s held by another listener: %v, want an error naming it", port, err)
	}
}

func TestDDPTwoNodesOverLoopback(t *testing.T) {
	needLinux(t)
	want := inProcess(t, 4)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	// Rank 0 inherits the bound listener, so no other test can take the
	// port between its choice and its use.
	lnFile, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer lnFile.Close()
	marker := newMarker(t)
	cmds := make([]*exec.Cmd, 4)
	outs := make([]strings.Builder, 4)
	errs := make([]strings.Builder, 4)
	for r := range cmds {
		cmd := exec.Command(os.Args[0], "-strategy", "ddp", "-devices", "2", "-num-nodes", "2")
		// FULGUR_SOCKET_IFNAME=lo: every rank binds and announces 127.0.0.1.
		cmd.Env = append(os.Environ(), programEnv+"=1", "FULGUR_TEST_MARKER="+marker, "FULGUR_TIMEOUT=60s", "FULGUR_SOCKET_IFNAME=lo")
		for k, v := range torchrun(r, 4, "MASTER_PORT", fmt.Sprint(port)) {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if r == 0 {
			cmd.ExtraFiles = []*os.File{lnFile}
			cmd.Env = append(cmd.Env, "FULGUR_RENDEZVOUS_FD=3")
		}
		cmd.Stdout, cmd.Stderr = &outs[r], &errs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("rank %d: %v\n%s", r, err, errs[r].String())
		}
	}
	if t.Failed() {
		return
	}
	got := parseResult(t, outs[0].String())
	if got.WorldSize != 4 || got.SHA256 != want.SHA256 {
		t.Errorf("two nodes: %+v, four in-process ranks: %+v", got, want)
	}
	for r := 1; r < 4; r++ {
		if outs[r].Len() != 0 {
			t.Errorf("rank %d printed %q: only rank 0 reports", r, outs[r].String())
		}
	}
}
