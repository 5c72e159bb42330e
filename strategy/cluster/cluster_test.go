package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name      string
		vars      map[string]string
		want      cluster.Env
		wantFound bool
		wantErr   string // substring; "" means no error
	}{
		{name: "none", vars: map[string]string{}, want: cluster.Single()},
		{
			name: "torchrun",
			vars: map[string]string{"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
				"GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"},
			want:      cluster.Env{Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, NodeRank: 1, NumNodes: 2, MasterAddr: "10.0.0.1", MasterPort: 29400, Source: "torchrun"},
			wantFound: true,
		},
		{
			name:      "torchrun wins over slurm",
			vars:      map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "4"},
			want:      cluster.Env{Rank: 0, WorldSize: 2, LocalRank: 0, LocalWorldSize: 2, NumNodes: 1, Source: "torchrun"},
			wantFound: true,
		},
		{
			name: "kubeflow",
			vars: map[string]string{"KUBERNETES_PORT": "tcp://10.96.0.1:443", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456",
				"WORLD_SIZE": "3", "RANK": "2"},
			want:      cluster.Env{Rank: 2, WorldSize: 3, LocalWorldSize: 1, NodeRank: 2, NumNodes: 3, MasterAddr: "job-master-0", MasterPort: 23456, Source: "kubeflow"},
			wantFound: true,
		},
		{
			name: "openmpi",
			vars: map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
				"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
			want:      cluster.Env{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, NodeRank: 1, NumNodes: 2, Source: "openmpi"},
			wantFound: true,
		},
		{
			name: "slurm with node list",
			vars: map[string]string{"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2", "SLURM_NODEID": "1",
				"SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "node[07-08]", "SLURM_JOB_ID": "123456"},
			want:      cluster.Env{Rank: 6, WorldSize: 8, LocalRank: 2, LocalWorldSize: 4, NodeRank: 1, NumNodes: 2, MasterAddr: "node07", MasterPort: 10000 + 123456%20000, Source: "slurm"},
			wantFound: true,
		},
		{
			name: "slurm with MASTER_ADDR",
			vars: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NNODES": "1",
				"SLURM_JOB_NODELIST": "a[1-2]", "MASTER_ADDR": "b", "MASTER_PORT": "1234"},
			want:      cluster.Env{WorldSize: 2, LocalWorldSize: 2, NumNodes: 1, MasterAddr: "b", MasterPort: 1234, Source: "slurm"},
			wantFound: true,
		},
		{name: "rank past world", vars: map[string]string{"RANK": "4", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}, wantFound: true, wantErr: "rank 4 is outside 0..3"},
		{name: "rank not a number", vars: map[string]string{"RANK": "x", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}, wantFound: true, wantErr: `RANK="x" is not a whole number`},
		{name: "port not a number", vars: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "http"}, wantFound: true, wantErr: `MASTER_PORT="http" is not a port number`},
		{name: "port too big", vars: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, wantFound: true, wantErr: "not a port number"},
		{name: "local rank past local size", vars: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, wantFound: true, wantErr: "local rank 2 is outside 0..1"},
		{name: "bad node list", vars: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "n[1-"}, wantFound: true, wantErr: "never closed"},
		{name: "negative world", vars: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "-2"}, wantFound: true, wantErr: "world size is -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found, err := cluster.Detect(cluster.MapLookup(tc.vars))
			if found != tc.wantFound {
				t.Errorf("found = %v, want %v", found, tc.wantFound)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestExpandHostList(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "node[01-04,07]", want: "node01 node02 node03 node04 node07"},
		{in: "a1,b[2-3],c", want: "a1 b2 b3 c"},
		{in: "r[1-2]-n[08-09]", want: "r1-n08 r1-n09 r2-n08 r2-n09"},
		{in: "gpu[9-11]", want: "gpu9 gpu10 gpu11"},
		{in: "single", want: "single"},
		{in: "n[3-1]", wantErr: true},
		{in: "n[a-b]", wantErr: true},
		{in: "n[1-2", wantErr: true},
		{in: "n]1", wantErr: true},
		{in: "a,,b", wantErr: true},
		{in: "n[0-99999999]", wantErr: true},
	} {
		got, err := cluster.ExpandHostList(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%q: expanded to %d hosts, want an error", tc.in, len(got))
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("%q: got %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestStatic(t *testing.T) {
	if _, err := cluster.Static(cluster.Env{Rank: 2, WorldSize: 2, LocalWorldSize: 1, NumNodes: 1}); err == nil {
		t.Error("rank 2 of 2 accepted")
	}
	e, err := cluster.Static(cluster.Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, NumNodes: 1, MasterAddr: "127.0.0.1", MasterPort: 5000})
	if err != nil || e.Source != "static" {
		t.Errorf("got %+v, %v", e, err)
	}
}

func FuzzExpandHostList(f *testing.F) {
	for _, s := range []string{"node[01-04,07]", "a,b", "x[1-2]-y[3-4]", "[", "]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := cluster.ExpandHostList(s)
		if err == nil && len(hosts) == 0 {
			t.Errorf("%q: no hosts and no error", s)
		}
	})
}

func ExampleDetect() {
	env, found, err := cluster.Detect(cluster.MapLookup(map[string]string{
		"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
		"SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "4242",
	}))
	fmt.Println(found, err)
	fmt.Printf("%s rank %d/%d local %d/%d node %d/%d at %s:%d\n", env.Source, env.Rank, env.WorldSize,
		env.LocalRank, env.LocalWorldSize, env.NodeRank, env.NumNodes, env.MasterAddr, env.MasterPort)
	// Output:
	// true <nil>
	// slurm rank 3/4 local 1/2 node 1/2 at gpu07:14242
}

// An interactive allocation (srun --pty bash, salloc's "interactive" job)
// sets SLURM_PROCID=0 and SLURM_NTASKS=1 for the shell itself; a program the
// user starts there launches its own ranks, as Lightning's SLURMEnvironment
// does, instead of being refused as a one-task job.
func TestDetectSLURMInteractiveShell(t *testing.T) {
	shell := map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
		"SLURM_NNODES": "1", "SLURM_TASKS_PER_NODE": "1", "SLURM_JOB_NODELIST": "node07", "SLURM_JOB_ID": "4242"}
	for _, tc := range []struct {
		jobName   string
		wantFound bool
	}{
		{"bash", false},
		{"interactive", false},
		{"train", true}, // an sbatch job or srun step is a launcher
		{"", true},
	} {
		vars := map[string]string{}
		for k, v := range shell {
			vars[k] = v
		}
		if tc.jobName != "" {
			vars["SLURM_JOB_NAME"] = tc.jobName
		}
		env, found, err := cluster.Detect(cluster.MapLookup(vars))
		if err != nil {
			t.Fatalf("SLURM_JOB_NAME=%q: %v", tc.jobName, err)
		}
		if found != tc.wantFound {
			t.Errorf("SLURM_JOB_NAME=%q: found = %v, want %v (env %+v)", tc.jobName, found, tc.wantFound, env)
		}
		if !tc.wantFound && env != cluster.Single() {
			t.Errorf("SLURM_JOB_NAME=%q: env = %+v, want Single()", tc.jobName, env)
		}
	}
}

// WORLD_SIZE above 1 says a launcher started this process as one of
// several; with RANK or LOCAL_RANK missing (a hand-written script that
// forgot one) no detector matched and the process ran as a job of its own,
// its ddp launching its own ranks beside the real ones. That is an error
// naming what is missing.
func TestDetectPartialTorchrunEnvironment(t *testing.T) {
	for _, tc := range []struct {
		vars    map[string]string
		wantErr string
	}{
		{map[string]string{"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "LOCAL_RANK is not set"},
		{map[string]string{"WORLD_SIZE": "4", "LOCAL_RANK": "0"}, "RANK is not set"},
		{map[string]string{"WORLD_SIZE": "2"}, "RANK is not set, LOCAL_RANK is not set"},
		{map[string]string{"WORLD_SIZE": "1", "RANK": "0"}, ""},                                              // one process: nothing to join
		{map[string]string{"RANK": "0", "LOCAL_RANK": "0"}, ""},                                              // no world claimed
		{map[string]string{"WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, ""}, // mpirun's own
	} {
		_, _, err := cluster.Detect(cluster.MapLookup(tc.vars))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.vars, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "WORLD_SIZE=")):
			t.Errorf("%v: error %v, want one containing %q and naming WORLD_SIZE", tc.vars, err, tc.wantErr)
		}
	}
}

// mpirun -np 2 on one host gives no rank-0 address: every rank is local, so
// the rendezvous is on loopback, at a port every rank derives from the job
// id (as SLURM's); on several hosts MASTER_ADDR is still needed.
func TestDetectOpenMPIOneHostRendezvous(t *testing.T) {
	oneHost := map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
		"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "617742337"}
	env, _, err := cluster.Detect(cluster.MapLookup(oneHost))
	if err != nil {
		t.Fatal(err)
	}
	if env.MasterAddr != "127.0.0.1" || env.MasterPort != 10000+617742337%20000 {
		t.Errorf("one host: master %s:%d, want 127.0.0.1:%d", env.MasterAddr, env.MasterPort, 10000+617742337%20000)
	}
	oneHost["MASTER_ADDR"], oneHost["MASTER_PORT"] = "10.0.0.1", "2345"
	if env, _, _ := cluster.Detect(cluster.MapLookup(oneHost)); env.MasterAddr != "10.0.0.1" || env.MasterPort != 2345 {
		t.Errorf("one host with MASTER_ADDR: master %s:%d, want 10.0.0.1:2345", env.MasterAddr, env.MasterPort)
	}
	twoHosts := map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
		"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "617742337"}
	if env, _, _ := cluster.Detect(cluster.MapLookup(twoHosts)); env.MasterAddr != "" {
		t.Errorf("two hosts: master %q, want none (rank 0's host is not known here)", env.MasterAddr)
	}
}
