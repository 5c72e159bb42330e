package deploy

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

// Vars is the environment of one process.
type Vars map[string]string

// Lookup has os.LookupEnv's shape, so Vars can be passed to cluster.Detect.
func (v Vars) Lookup(key string) (string, bool) {
	s, ok := v[key]
	return s, ok
}

// ParseEnviron reads KEY=VALUE entries (os.Environ's or `env -0`'s form).
func ParseEnviron(entries []string) Vars {
	v := Vars{}
	for _, kv := range entries {
		if k, val, ok := strings.Cut(kv, "="); ok && k != "" {
			v[k] = val
		}
	}
	return v
}

// SrunStep is one srun job step inside an allocation: Nodes × TasksPerNode
// tasks with srun's default block distribution (node 0 runs tasks
// 0..TasksPerNode-1, and so on).
type SrunStep struct {
	// Env is srun's own environment: the batch script's, with the
	// allocation's SLURM_JOB_ID and SLURM_JOB_NODELIST.
	Env          Vars
	Nodes        int
	TasksPerNode int
	CPUsPerTask  int // 0: unset
}

// Tasks returns every task's environment in rank order: Env plus what srun
// sets for each task (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID,
// SLURM_NTASKS, SLURM_NNODES, SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE,
// SLURMD_NODENAME and their SLURM_STEP_* forms).
func (s SrunStep) Tasks() ([]Vars, error) {
	var errs []error
	if s.Nodes < 1 {
		errs = append(errs, fmt.Errorf("srun: %d nodes: use 1 or more", s.Nodes))
	}
	if s.TasksPerNode < 1 {
		errs = append(errs, fmt.Errorf("srun: %d tasks per node: use 1 or more", s.TasksPerNode))
	}
	var hosts []string
	if list := s.Env["SLURM_JOB_NODELIST"]; list != "" {
		h, err := cluster.ExpandHostList(list)
		if err != nil {
			errs = append(errs, fmt.Errorf("srun: SLURM_JOB_NODELIST: %w", err))
		} else if len(h) < s.Nodes {
			errs = append(errs, fmt.Errorf("srun: %d nodes asked, but the allocation %q has %d", s.Nodes, list, len(h)))
		}
		hosts = h
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	n := s.Nodes * s.TasksPerNode
	perNode := fmt.Sprintf("%d(x%d)", s.TasksPerNode, s.Nodes)
	if s.Nodes == 1 {
		perNode = strconv.Itoa(s.TasksPerNode)
	}
	out := make([]Vars, 0, n)
	for node := range s.Nodes {
		for local := range s.TasksPerNode {
			v := maps.Clone(s.Env)
			if v == nil {
				v = Vars{}
			}
			set := func(k string, x int) { v[k] = strconv.Itoa(x) }
			set("SLURM_PROCID", node*s.TasksPerNode+local)
			set("SLURM_LOCALID", local)
			set("SLURM_NODEID", node)
			set("SLURM_NTASKS", n)
			set("SLURM_NPROCS", n)
			set("SLURM_STEP_NUM_TASKS", n)
			set("SLURM_NNODES", s.Nodes)
			set("SLURM_STEP_NUM_NODES", s.Nodes)
			set("SLURM_NTASKS_PER_NODE", s.TasksPerNode)
			v["SLURM_TASKS_PER_NODE"] = perNode
			v["SLURM_STEP_TASKS_PER_NODE"] = perNode
			if s.CPUsPerTask > 0 {
				set("SLURM_CPUS_PER_TASK", s.CPUsPerTask)
			}
			if hosts != nil {
				v["SLURMD_NODENAME"] = hosts[node]
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// Host is one line of an Open MPI hostfile: "name slots=N".
type Host struct {
	Name  string
	Slots int
}

// ParseHostfile reads an Open MPI hostfile: one host per line, optional
// "slots=N" (default 1), '#' comments.
func ParseHostfile(text string) ([]Host, error) {
	var hosts []Host
	for i, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		h := Host{Name: f[0], Slots: 1}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			if k != "slots" {
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("hostfile line %d: %q is not slots=N with N ≥ 1", i+1, kv)
			}
			h.Slots = n
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, errors.New("hostfile lists no host")
	}
	return hosts, nil
}

// Mpirun is one mpirun of Open MPI 4 with by-slot mapping: ranks fill the
// first host's slots, then the next host's.
type Mpirun struct {
	// Env is mpirun's own environment.
	Env Vars
	// Export are the -x arguments: NAME (its value in Env) or NAME=VALUE.
	Export []string
	Hosts  []Host
	NP     int
	// Local is the host mpirun runs on ("" when it is none of Hosts, as in
	// a Kubeflow MPIJob, whose launcher runs in a pod of its own).
	Local string
}

// Ranks returns every rank's environment in rank order. A rank on the Local
// host inherits Env; a rank elsewhere gets only the exported variables and
// the OMPI_* variables of its place, as Open MPI forwards nothing else to
// remote daemons.
func (m Mpirun) Ranks() ([]Vars, error) {
	slots := 0
	for _, h := range m.Hosts {
		slots += h.Slots
	}
	if m.NP < 1 {
		return nil, fmt.Errorf("mpirun: -np %d: use 1 or more", m.NP)
	}
	if m.NP > slots {
		return nil, fmt.Errorf("mpirun: -np %d but the hosts have %d slots (oversubscription is not modelled)", m.NP, slots)
	}
	exported := Vars{}
	for _, x := range m.Export {
		k, v, ok := strings.Cut(x, "=")
		if !ok {
			if v, ok = m.Env[k]; !ok {
				return nil, fmt.Errorf("mpirun: -x %s but %s is not set in mpirun's environment", k, k)
			}
		}
		exported[k] = v
	}
	// place[r] = (host index, local rank); size[h] = ranks on host h.
	type place struct{ host, local int }
	var places []place
	size := make([]int, len(m.Hosts))
	for h, host := range m.Hosts {
		for l := 0; l < host.Slots && len(places) < m.NP; l++ {
			places = append(places, place{h, l})
			size[h]++
		}
	}
	out := make([]Vars, m.NP)
	for r, p := range places {
		v := Vars{}
		if m.Hosts[p.host].Name == m.Local {
			v = maps.Clone(m.Env)
			if v == nil {
				v = Vars{}
			}
		}
		maps.Copy(v, exported)
		set := func(k string, x int) { v[k] = strconv.Itoa(x) }
		set("OMPI_COMM_WORLD_RANK", r)
		set("OMPI_COMM_WORLD_SIZE", m.NP)
		set("OMPI_COMM_WORLD_LOCAL_RANK", p.local)
		set("OMPI_COMM_WORLD_LOCAL_SIZE", size[p.host])
		set("OMPI_COMM_WORLD_NODE_RANK", p.local)
		set("OMPI_UNIVERSE_SIZE", slots)
		out[r] = v
	}
	return out, nil
}

// PyTorchJob is what the Kubeflow training operator (kubeflow.org/v1) sets
// in the container of every pod of a PyTorchJob with a Master replica: one
// process per pod (nprocPerNode 1), pods in rank order master-0, worker-0,
// worker-1, ...
type PyTorchJob struct {
	Name       string // metadata.name
	Masters    int    // replicas of Master (1)
	Workers    int    // replicas of Worker
	MasterPort int    // containerPort of the port named "pytorchjob-port"
}

// Pods returns the variables the operator and Kubernetes add to each pod's
// container, in rank order. Variables the manifest sets come before these in
// the container's list, so for a repeated name the operator's value wins.
func (j PyTorchJob) Pods() ([]Vars, error) {
	var errs []error
	if j.Masters != 1 {
		errs = append(errs, fmt.Errorf("PyTorchJob %s: %d Master replicas: the operator needs exactly 1 to set MASTER_ADDR and RANK", j.Name, j.Masters))
	}
	if j.Workers < 0 {
		errs = append(errs, fmt.Errorf("PyTorchJob %s: %d Worker replicas", j.Name, j.Workers))
	}
	if j.MasterPort < 1 || j.MasterPort > 65535 {
		errs = append(errs, fmt.Errorf("PyTorchJob %s: the Master's container has no port named pytorchjob-port in 1..65535 (got %d)", j.Name, j.MasterPort))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	world := j.Masters + j.Workers
	out := make([]Vars, world)
	for r := range world {
		out[r] = Vars{
			"MASTER_ADDR":             j.Name + "-master-0",
			"MASTER_PORT":             strconv.Itoa(j.MasterPort),
			"WORLD_SIZE":              strconv.Itoa(world),
			"RANK":                    strconv.Itoa(r),
			"PET_NPROC_PER_NODE":      "1",
			"PET_NODE_RANK":           strconv.Itoa(r),
			"PET_NNODES":              strconv.Itoa(world),
			"PYTHONUNBUFFERED":        "0",
			"KUBERNETES_PORT":         "tcp://10.96.0.1:443",
			"KUBERNETES_SERVICE_HOST": "10.96.0.1",
			"KUBERNETES_SERVICE_PORT": "443",
		}
	}
	return out, nil
}
