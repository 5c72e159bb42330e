package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/deploy"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

// A stand-in for srun or mpirun: it records its arguments and environment
// (NUL-separated) where the test says, and exits 0.
const fakeLauncher = `#!/bin/sh
out=$DEPLOY_FAKE_OUT/$(basename "$0")
for a in "$@"; do printf '%s\0' "$a"; done >"$out.args"
env -0 >"$out.env"
`

// launched is what a script handed to the stand-in launcher.
type launched struct {
	args []string
	env  deploy.Vars
}

// runScript runs a deploy script with bash in a clean environment (env plus
// PATH, with stand-ins for srun and mpirun first on it) and returns its
// combined output, its exit status and what it launched (nil when it
// launched nothing).
func runScript(t *testing.T, script string, env deploy.Vars, args ...string) (string, int, *launched) {
	t.Helper()
	bin, out := t.TempDir(), t.TempDir()
	for _, name := range []string{"srun", "mpirun"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(fakeLauncher), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "DEPLOY_FAKE_OUT=" + out}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("bash %s: %v", script, err)
	}
	entries, _ := filepath.Glob(filepath.Join(out, "*.args"))
	if len(entries) == 0 {
		return buf.String(), code, nil
	}
	if len(entries) > 1 {
		t.Fatalf("%s launched twice: %v", script, entries)
	}
	a, err := os.ReadFile(entries[0])
	if err != nil {
		t.Fatal(err)
	}
	e, err := os.ReadFile(strings.TrimSuffix(entries[0], ".args") + ".env")
	if err != nil {
		t.Fatal(err)
	}
	l := &launched{args: splitNUL(a), env: deploy.ParseEnviron(splitNUL(e))}
	delete(l.env, "DEPLOY_FAKE_OUT")
	return buf.String(), code, l
}

func splitNUL(b []byte) []string {
	s := strings.Split(string(b), "\x00")
	return s[:len(s)-1]
}

// program is the command a launcher runs: its path and its flags.
type program struct {
	path  string
	flags []string
}

// flag returns the value after -name, failing the test when it is absent.
func (p program) flag(t *testing.T, name string) string {
	t.Helper()
	i := slices.Index(p.flags, "-"+name)
	if i < 0 || i+1 >= len(p.flags) {
		t.Fatalf("%s is run without -%s: %v", p.path, name, p.flags)
	}
	return p.flags[i+1]
}

func (p program) intFlag(t *testing.T, name string) int {
	t.Helper()
	n, err := strconv.Atoi(p.flag(t, name))
	if err != nil {
		t.Fatalf("-%s: %v", name, err)
	}
	return n
}

// checkRanks feeds each rank's environment to cluster.Detect and checks it
// finds the job the program's flags describe, from the launcher it expects:
// rank i at position i, every rank agreeing on the world and on rank 0's
// address, and -devices × -num-nodes equal to the world (what DDP demands).
func checkRanks(t *testing.T, ranks []deploy.Vars, p program, source, masterAddr string, masterPort int) []cluster.Env {
	t.Helper()
	nodes, perNode := p.intFlag(t, "num-nodes"), p.intFlag(t, "devices")
	if s := p.flag(t, "strategy"); s != "ddp" {
		t.Errorf("-strategy %s, want ddp", s)
	}
	if len(ranks) != nodes*perNode {
		t.Fatalf("%d ranks started, but -num-nodes %d × -devices %d = %d", len(ranks), nodes, perNode, nodes*perNode)
	}
	envs := make([]cluster.Env, len(ranks))
	token := ranks[0]["FULGUR_TOKEN"]
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(token) && token != "s3cret" && !strings.HasPrefix(token, "secret:") {
		t.Errorf("rank 0 has FULGUR_TOKEN %q, want 32 hex digits, the caller's or a Kubernetes secret", token)
	}
	for r, v := range ranks {
		e, found, err := cluster.Detect(v.Lookup)
		if err != nil || !found {
			t.Fatalf("rank %d: Detect: found %v, %v", r, found, err)
		}
		want := cluster.Env{
			Rank: r, WorldSize: nodes * perNode, LocalRank: r % perNode, LocalWorldSize: perNode,
			NodeRank: r / perNode, NumNodes: nodes, MasterAddr: masterAddr, MasterPort: masterPort, Source: source,
		}
		if e != want {
			t.Errorf("rank %d:\n got  %+v\n want %+v", r, e, want)
		}
		if v["FULGUR_TOKEN"] != token {
			t.Errorf("rank %d has FULGUR_TOKEN %q, rank 0 %q: the rendezvous would refuse it", r, v["FULGUR_TOKEN"], token)
		}
		envs[r] = e
	}
	return envs
}

// sbatchDirectives reads the #SBATCH --name=value lines of a script.
func sbatchDirectives(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "#SBATCH ")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(strings.TrimSpace(rest), "=")
		d[strings.TrimPrefix(k, "--")] = v
	}
	return d
}

func atoi(t *testing.T, what, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %q is not a number", what, s)
	}
	return n
}

// splitOptions separates a launcher's own --options from the program and
// its flags: the program is the first argument that is not an option or an
// option's value.
func splitOptions(args []string, takesValue map[string]bool) (opts map[string][]string, p program) {
	opts = map[string][]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return opts, program{path: a, flags: args[i+1:]}
		}
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "--") {
			opts[k] = append(opts[k], v)
			continue
		}
		if takesValue[a] && i+1 < len(args) {
			opts[a] = append(opts[a], args[i+1])
			i++
			continue
		}
		opts[a] = append(opts[a], "")
	}
	return opts, program{}
}

// stale are launcher variables a user's shell may still hold from another
// job; the scripts must keep them from reaching the ranks.
var stale = deploy.Vars{
	"RANK": "7", "WORLD_SIZE": "9", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "3", "MASTER_ADDR": "old-host",
	"MASTER_PORT": "1234", "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "9", "KUBERNETES_PORT": "tcp://1.2.3.4:443",
}

func TestSbatchScript(t *testing.T) {
	const script = "slurm/fulgur.sbatch"
	d := sbatchDirectives(t, script)
	for _, k := range []string{"nodes", "ntasks-per-node", "cpus-per-task"} {
		if d[k] == "" {
			t.Fatalf("%s has no #SBATCH --%s", script, k)
		}
	}
	for _, tc := range []struct {
		name                  string
		nodes, perNode, cpus  int
		nodelist              string
		jobID                 int
		extra                 deploy.Vars
		wantToken, masterAddr string
	}{
		{name: "the script's own directives", nodes: atoi(t, "--nodes", d["nodes"]), perNode: atoi(t, "--ntasks-per-node", d["ntasks-per-node"]),
			cpus: atoi(t, "--cpus-per-task", d["cpus-per-task"]), nodelist: "node[07-08]", jobID: 4242, masterAddr: "node07"},
		{name: "sbatch --nodes=3 --ntasks-per-node=2 --cpus-per-task=4", nodes: 3, perNode: 2, cpus: 4,
			nodelist: "gpu[1-2],gpu10", jobID: 123456, masterAddr: "gpu1"},
		{name: "stale launcher variables in the submitting shell", nodes: 2, perNode: 2, cpus: 1,
			nodelist: "n[1-2]", jobID: 9, extra: stale, masterAddr: "n1"},
		{name: "caller's token kept", nodes: 1, perNode: 2, cpus: 1, nodelist: "solo", jobID: 5,
			extra: deploy.Vars{"FULGUR_TOKEN": "s3cret"}, wantToken: "s3cret", masterAddr: "solo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What sbatch puts in the batch script's environment.
			batch := deploy.Vars{
				"SLURM_JOB_ID": strconv.Itoa(tc.jobID), "SLURM_JOB_NUM_NODES": strconv.Itoa(tc.nodes), "SLURM_NNODES": strconv.Itoa(tc.nodes),
				"SLURM_JOB_NODELIST": tc.nodelist, "SLURM_NODELIST": tc.nodelist, "SLURM_NTASKS_PER_NODE": strconv.Itoa(tc.perNode),
				"SLURM_NTASKS": strconv.Itoa(tc.nodes * tc.perNode), "SLURM_TASKS_PER_NODE": fmt.Sprintf("%d(x%d)", tc.perNode, tc.nodes),
				"SLURM_CPUS_PER_TASK": strconv.Itoa(tc.cpus), "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
			}
			for k, v := range tc.extra {
				batch[k] = v
			}
			out, code, l := runScript(t, script, batch, "./mlp", "-max-epochs", "3", "-seed", "1")
			if code != 0 || l == nil {
				t.Fatalf("exit %d, launched %v:\n%s", code, l != nil, out)
			}
			opts, p := splitOptions(l.args, nil)
			if p.path != "./mlp" || !slices.Equal(p.flags[len(p.flags)-4:], []string{"-max-epochs", "3", "-seed", "1"}) {
				t.Errorf("srun runs %s %v; want ./mlp with the caller's flags last", p.path, p.flags)
			}
			for k, want := range map[string]int{"--nodes": tc.nodes, "--ntasks-per-node": tc.perNode, "--cpus-per-task": tc.cpus, "--kill-on-bad-exit": 1} {
				if got := opts[k]; len(got) != 1 || got[0] != strconv.Itoa(want) {
					t.Errorf("srun %s=%v, want %d", k, got, want)
				}
			}
			tasks, err := deploy.SrunStep{Env: l.env, Nodes: tc.nodes, TasksPerNode: tc.perNode, CPUsPerTask: tc.cpus}.Tasks()
			if err != nil {
				t.Fatal(err)
			}
			checkRanks(t, tasks, p, "slurm", tc.masterAddr, 10000+tc.jobID%20000)
			if tc.wantToken != "" && l.env["FULGUR_TOKEN"] != tc.wantToken {
				t.Errorf("FULGUR_TOKEN %q, want the caller's %q", l.env["FULGUR_TOKEN"], tc.wantToken)
			}
			if got := l.env["FULGUR_BLAS_THREADS"]; got != strconv.Itoa(tc.cpus) {
				t.Errorf("FULGUR_BLAS_THREADS=%q, want one per core of the task (%d)", got, tc.cpus)
			}
		})
	}
}

func TestSbatchScriptRefuses(t *testing.T) {
	alloc := deploy.Vars{"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NODELIST": "n[1-2]"}
	without := func(k string) deploy.Vars {
		v := deploy.Vars{}
		for kk, vv := range alloc {
			if kk != k {
				v[kk] = vv
			}
		}
		return v
	}
	for _, tc := range []struct {
		name string
		env  deploy.Vars
		args []string
		want string
	}{
		{"no program", alloc, nil, "usage: sbatch fulgur.sbatch PROGRAM"},
		{"outside an allocation", without("SLURM_JOB_ID"), []string{"./mlp"}, "not inside a SLURM allocation"},
		{"no tasks per node", without("SLURM_NTASKS_PER_NODE"), []string{"./mlp"}, "set --ntasks-per-node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code, l := runScript(t, "slurm/fulgur.sbatch", tc.env, tc.args...)
			if code == 0 || l != nil || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, launched %v, output %q; want a failure saying %q", code, l != nil, out, tc.want)
			}
		})
	}
}

// mpirunOptions are mpirun's options that take a value.
var mpirunOptions = map[string]bool{"-np": true, "-n": true, "--hostfile": true, "-x": true, "--map-by": true, "--bind-to": true, "--mca": true}

// mpirunJob reads a recorded mpirun command line into the model.
func mpirunJob(t *testing.T, args []string, env deploy.Vars, hosts []deploy.Host, local string) (deploy.Mpirun, program) {
	t.Helper()
	opts, p := splitOptions(args, mpirunOptions)
	np := opts["-np"]
	if len(np) != 1 {
		t.Fatalf("mpirun without exactly one -np: %v", args)
	}
	if m := opts["--map-by"]; len(m) != 1 || m[0] != "slot" {
		t.Errorf("mpirun --map-by %v: want slot, so ranks fill each host in turn (node rank = rank / ranks per node)", m)
	}
	return deploy.Mpirun{Env: env, Export: opts["-x"], Hosts: hosts, NP: atoi(t, "-np", np[0]), Local: local}, p
}

func TestMpirunScript(t *testing.T) {
	twoByFour := "# two machines\nnode1 slots=4\nnode2 slots=4 # same\n"
	for _, tc := range []struct {
		name       string
		hostfile   string
		args       []string
		env        deploy.Vars
		local      string // the host mpirun runs on
		backend    string
		masterAddr string
		masterPort int
	}{
		{name: "tcp from a login node", hostfile: twoByFour, backend: "tcp", masterAddr: "node1", masterPort: 29500},
		{name: "tcp from the first node, stale variables", hostfile: twoByFour, env: stale, local: "node1", backend: "tcp", masterAddr: "node1", masterPort: 29500},
		{name: "tcp, port and rank count given", hostfile: twoByFour, args: []string{"-p", "31000", "-n", "4"}, backend: "tcp", masterAddr: "node1", masterPort: 31000},
		{name: "mpi backend", hostfile: twoByFour, args: []string{"-b", "mpi"}, local: "node2", backend: "mpi"},
		{name: "one host, default slots", hostfile: "a\nb\nc\n", backend: "tcp", masterAddr: "a", masterPort: 29500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hf := filepath.Join(t.TempDir(), "hosts")
			if err := os.WriteFile(hf, []byte(tc.hostfile), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append(append([]string{"-f", hf}, tc.args...), "./mlp", "-max-epochs", "1")
			out, code, l := runScript(t, "mpi/run.sh", tc.env, args...)
			if code != 0 || l == nil {
				t.Fatalf("exit %d, launched %v:\n%s", code, l != nil, out)
			}
			hosts, err := deploy.ParseHostfile(tc.hostfile)
			if err != nil {
				t.Fatal(err)
			}
			job, p := mpirunJob(t, l.args, l.env, hosts, tc.local)
			if p.path != "./mlp" || !slices.Equal(p.flags[len(p.flags)-2:], []string{"-max-epochs", "1"}) {
				t.Errorf("mpirun runs %s %v; want ./mlp with the caller's flags last", p.path, p.flags)
			}
			ranks, err := job.Ranks()
			if err != nil {
				t.Fatal(err)
			}
			checkRanks(t, ranks, p, "openmpi", tc.masterAddr, tc.masterPort)
			for r, v := range ranks {
				if v["FULGUR_BACKEND"] != tc.backend || v["FULGUR_BLAS_THREADS"] != "1" {
					t.Errorf("rank %d: FULGUR_BACKEND=%q FULGUR_BLAS_THREADS=%q, want %q and 1", r, v["FULGUR_BACKEND"], v["FULGUR_BLAS_THREADS"], tc.backend)
				}
			}
		})
	}
}

func TestMpirunScriptRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, hostfile string
		args           []string
		want           string
	}{
		{"uneven slots", "a slots=2\nb slots=3\n", nil, "different slot counts (2 3)"},
		{"ranks not a multiple of the slots", "a slots=4\nb slots=4\n", []string{"-n", "6"}, "-n 6: use a multiple of 4"},
		{"more ranks than slots", "a slots=2\n", []string{"-n", "4"}, "at most 2"},
		{"unknown backend", "a\n", []string{"-b", "gloo"}, "-b gloo: use tcp, mpi, auto or shm"},
		{"empty hostfile", "# nothing\n", nil, "lists no host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hf := filepath.Join(t.TempDir(), "hosts")
			if err := os.WriteFile(hf, []byte(tc.hostfile), 0o644); err != nil {
				t.Fatal(err)
			}
			out, code, l := runScript(t, "mpi/run.sh", nil, append(append([]string{"-f", hf}, tc.args...), "./mlp")...)
			if code == 0 || l != nil || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, launched %v, output %q; want a failure saying %q", code, l != nil, out, tc.want)
			}
		})
	}
	out, code, _ := runScript(t, "mpi/run.sh", nil, "-f", "no-such-file", "./mlp")
	if code == 0 || !strings.Contains(out, "cannot read the hostfile no-such-file") {
		t.Errorf("missing hostfile: exit %d, %q", code, out)
	}
}
