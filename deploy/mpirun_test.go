//go:build mpi

package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/deploy"
)

// dumpEnv is set when this test binary runs as a rank under mpirun: it then
// writes its environment and arguments to the directory named and exits.
const dumpEnv = "DEPLOY_DUMP_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(dumpEnv); dir != "" {
		rank := os.Getenv("OMPI_COMM_WORLD_RANK")
		body := strings.Join(os.Environ(), "\x00") + "\x00\x00" + strings.Join(os.Args[1:], "\x00")
		if err := os.WriteFile(filepath.Join(dir, "rank-"+rank), []byte(body), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRunScriptUnderRealMpirun runs deploy/mpi/run.sh with Open MPI's own
// mpirun on this machine (4 slots of localhost), this test binary standing
// in for the program, and checks what each rank really received: the OMPI_*
// variables against the Mpirun model, and cluster.Detect against the flags.
//
//	go test -tags mpi -run TestRunScriptUnderRealMpirun ./deploy/
func TestRunScriptUnderRealMpirun(t *testing.T) {
	if _, ok := os.LookupEnv("OMPI_COMM_WORLD_SIZE"); ok {
		t.Skip("already running under mpirun")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun is not installed (apt-get install openmpi-bin)")
	}
	for _, backend := range []string{"tcp", "mpi"} {
		t.Run(backend, func(t *testing.T) {
			dir, hf := t.TempDir(), filepath.Join(t.TempDir(), "hosts")
			if err := os.WriteFile(hf, []byte("localhost slots=4\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", "mpi/run.sh", "-b", backend, "-f", hf, os.Args[0], "-max-epochs", "1")
			cmd.Env = append(os.Environ(), dumpEnv+"="+dir, "RANK=3", "WORLD_SIZE=8", "LOCAL_RANK=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("run.sh: %v\n%s", err, out)
			}
			var ranks []deploy.Vars
			var p program
			for r := range 4 {
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprint("rank-", r)))
				if err != nil {
					t.Fatalf("rank %d wrote nothing: %v", r, err)
				}
				env, args, _ := strings.Cut(string(b), "\x00\x00")
				ranks = append(ranks, deploy.ParseEnviron(strings.Split(env, "\x00")))
				p = program{path: os.Args[0], flags: strings.Split(args, "\x00")}
			}
			model, err := deploy.Mpirun{Hosts: []deploy.Host{{"localhost", 4}}, NP: 4}.Ranks()
			if err != nil {
				t.Fatal(err)
			}
			for r := range ranks {
				for k, want := range model[r] {
					if got := ranks[r][k]; got != want {
						t.Errorf("rank %d: Open MPI set %s=%q, the model says %q", r, k, got, want)
					}
				}
			}
			master, port := "localhost", 29500
			if backend == "mpi" {
				// run.sh exports no MASTER_ADDR for the mpi backend: every
				// rank is on this host, so the rendezvous address is
				// loopback at the port all derive from Open MPI's job id.
				id, err := strconv.Atoi(ranks[0]["OMPI_MCA_ess_base_jobid"])
				if err != nil {
					t.Fatalf("rank 0's OMPI_MCA_ess_base_jobid: %v", err)
				}
				master, port = "127.0.0.1", 10000+id%20000
			}
			checkRanks(t, ranks, p, "openmpi", master, port)
		})
	}
}
