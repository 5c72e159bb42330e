package deploy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/deploy"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

func TestModelsRefuse(t *testing.T) {
	hosts := []deploy.Host{{"a", 2}, {"b", 2}}
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"srun without nodes", func() error { _, err := deploy.SrunStep{TasksPerNode: 1}.Tasks(); return err }, "0 nodes"},
		{"srun past the allocation", func() error {
			_, err := deploy.SrunStep{Env: deploy.Vars{"SLURM_JOB_NODELIST": "n[1-2]"}, Nodes: 3, TasksPerNode: 1}.Tasks()
			return err
		}, `3 nodes asked, but the allocation "n[1-2]" has 2`},
		{"srun bad node list", func() error {
			_, err := deploy.SrunStep{Env: deploy.Vars{"SLURM_JOB_NODELIST": "n[1-"}, Nodes: 1, TasksPerNode: 1}.Tasks()
			return err
		}, "never closed"},
		{"mpirun past the slots", func() error { _, err := deploy.Mpirun{Hosts: hosts, NP: 5}.Ranks(); return err }, "-np 5 but the hosts have 4 slots"},
		{"mpirun exports an unset variable", func() error {
			_, err := deploy.Mpirun{Hosts: hosts, NP: 2, Export: []string{"FULGUR_TOKEN"}}.Ranks()
			return err
		}, "-x FULGUR_TOKEN but FULGUR_TOKEN is not set"},
		{"hostfile bad slots", func() error { _, err := deploy.ParseHostfile("a slots=x\n"); return err }, `line 1: "slots=x"`},
		{"hostfile empty", func() error { _, err := deploy.ParseHostfile("# none\n\n"); return err }, "lists no host"},
		{"pytorchjob without master", func() error {
			_, err := deploy.PyTorchJob{Name: "j", Workers: 2, MasterPort: 1}.Pods()
			return err
		}, "0 Master replicas"},
		{"pytorchjob without port", func() error { _, err := deploy.PyTorchJob{Name: "j", Masters: 1}.Pods(); return err }, "no port named pytorchjob-port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestMpirunForwardsOnlyExportsToRemoteHosts(t *testing.T) {
	ranks, err := deploy.Mpirun{
		Env:    deploy.Vars{"HOME": "/root", "FULGUR_TOKEN": "t"},
		Export: []string{"FULGUR_TOKEN", "MASTER_ADDR=a"},
		Hosts:  []deploy.Host{{"a", 1}, {"b", 2}},
		NP:     3,
		Local:  "a",
	}.Ranks()
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range []struct{ home, local, size string }{{"/root", "0", "1"}, {"", "0", "2"}, {"", "1", "2"}} {
		v := ranks[r]
		if v["HOME"] != want.home || v["OMPI_COMM_WORLD_LOCAL_RANK"] != want.local || v["OMPI_COMM_WORLD_LOCAL_SIZE"] != want.size ||
			v["FULGUR_TOKEN"] != "t" || v["MASTER_ADDR"] != "a" || v["OMPI_COMM_WORLD_RANK"] != fmt.Sprint(r) {
			t.Errorf("rank %d: %v", r, v)
		}
	}
}

func ExampleSrunStep() {
	// sbatch --nodes=2 --ntasks-per-node=2: srun starts four tasks.
	tasks, err := deploy.SrunStep{
		Env:   deploy.Vars{"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-08]", "FULGUR_TOKEN": "t"},
		Nodes: 2, TasksPerNode: 2,
	}.Tasks()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, task := range tasks {
		env, _, err := cluster.Detect(task.Lookup)
		fmt.Printf("%s rank %d/%d, local %d/%d, node %d/%d, rendezvous %s:%d %v\n", env.Source, env.Rank, env.WorldSize,
			env.LocalRank, env.LocalWorldSize, env.NodeRank, env.NumNodes, env.MasterAddr, env.MasterPort, err)
	}
	// Output:
	// slurm rank 0/4, local 0/2, node 0/2, rendezvous gpu07:14242 <nil>
	// slurm rank 1/4, local 1/2, node 0/2, rendezvous gpu07:14242 <nil>
	// slurm rank 2/4, local 0/2, node 1/2, rendezvous gpu07:14242 <nil>
	// slurm rank 3/4, local 1/2, node 1/2, rendezvous gpu07:14242 <nil>
}
