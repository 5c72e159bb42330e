package cluster

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
)

// Env is this process's place in the job.
type Env struct {
	Rank           int    // global rank, 0..WorldSize-1
	WorldSize      int    // number of processes in the job
	LocalRank      int    // rank among the processes on this node
	LocalWorldSize int    // processes on this node
	NodeRank       int    // this node's index, 0..NumNodes-1
	NumNodes       int    // nodes in the job
	MasterAddr     string // host of rank 0's rendezvous ("" when the launcher gives none)
	MasterPort     int    // port of rank 0's rendezvous (0 when MasterAddr is "")
	Source         string // which detector produced it: "torchrun", "kubeflow", "openmpi", "slurm", "static", "single"
}

// Single is the environment of a process started on its own.
func Single() Env {
	return Env{WorldSize: 1, LocalWorldSize: 1, NumNodes: 1, Source: "single"}
}

// Lookup reads one variable; it has os.LookupEnv's shape.
type Lookup func(key string) (string, bool)

// OSLookup reads the process environment. It is, with HostID, the only place
// this package touches os.
func OSLookup(key string) (string, bool) { return os.LookupEnv(key) }

// MapLookup serves variables from a map (tests, static configurations).
func MapLookup(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Detector recognises one launcher. Detect returns found == false when its
// variables are absent, and an error when they are present but invalid.
type Detector struct {
	Name   string
	Detect func(Lookup) (Env, bool, error)
}

// Detectors is the order Detect tries (see the package documentation).
var Detectors = []Detector{
	{"torchrun", detectTorchrun},
	{"kubeflow", detectKubeflow},
	{"openmpi", detectOpenMPI},
	{"slurm", detectSLURM},
}

// Detect returns the environment of the first launcher whose variables are
// set, found == false and Single() when none is, or an error naming each bad
// variable.
func Detect(lookup Lookup) (Env, bool, error) {
	for _, d := range Detectors {
		env, ok, err := d.Detect(lookup)
		if err != nil {
			return Env{}, true, fmt.Errorf("cluster: %s environment: %w", d.Name, err)
		}
		if ok {
			env.Source = d.Name
			return env, true, nil
		}
	}
	if err := partialTorchrun(lookup); err != nil {
		return Env{}, true, err
	}
	return Single(), false, nil
}

// partialTorchrun is an error when WORLD_SIZE says this process is one of
// several but no launcher's variables are complete: run on its own, it
// would start a job of its own beside the real one.
func partialTorchrun(lookup Lookup) error {
	ws, _ := lookup("WORLD_SIZE")
	if n, err := strconv.Atoi(strings.TrimSpace(ws)); err != nil || n <= 1 {
		return nil
	}
	var missing []string
	for _, k := range []string{"RANK", "LOCAL_RANK"} {
		if v, ok := lookup(k); !ok || strings.TrimSpace(v) == "" {
			missing = append(missing, k+" is not set")
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("cluster: WORLD_SIZE=%s says this process is one rank of a job, but %s: set RANK, WORLD_SIZE and LOCAL_RANK for every process, as torchrun does (a Kubeflow PyTorchJob sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK), or unset WORLD_SIZE to let the program launch its own ranks", strings.TrimSpace(ws), strings.Join(missing, ", "))
}

// Static validates a fixed environment (tests, hand-written configurations).
func Static(e Env) (Env, error) {
	e.Source = "static"
	if err := e.Validate(); err != nil {
		return Env{}, fmt.Errorf("cluster: static environment: %w", err)
	}
	return e, nil
}

// Validate reports every inconsistent field at once.
func (e Env) Validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if e.WorldSize < 1 {
		bad("world size is %d: it must be 1 or more", e.WorldSize)
	}
	if e.Rank < 0 || (e.WorldSize >= 1 && e.Rank >= e.WorldSize) {
		bad("rank %d is outside 0..%d (world size %d)", e.Rank, e.WorldSize-1, e.WorldSize)
	}
	if e.LocalWorldSize < 1 || (e.WorldSize >= 1 && e.LocalWorldSize > e.WorldSize) {
		bad("local world size %d must be between 1 and the world size %d", e.LocalWorldSize, e.WorldSize)
	}
	if e.LocalRank < 0 || (e.LocalWorldSize >= 1 && e.LocalRank >= e.LocalWorldSize) {
		bad("local rank %d is outside 0..%d (local world size %d)", e.LocalRank, e.LocalWorldSize-1, e.LocalWorldSize)
	}
	if e.NumNodes < 1 || (e.WorldSize >= 1 && e.NumNodes > e.WorldSize) {
		bad("number of nodes %d must be between 1 and the world size %d", e.NumNodes, e.WorldSize)
	}
	if e.NodeRank < 0 || (e.NumNodes >= 1 && e.NodeRank >= e.NumNodes) {
		bad("node rank %d is outside 0..%d (%d nodes)", e.NodeRank, e.NumNodes-1, e.NumNodes)
	}
	if e.MasterAddr != "" && (e.MasterPort < 1 || e.MasterPort > 65535) {
		bad("master port %d is outside 1..65535", e.MasterPort)
	}
	if strings.ContainsAny(e.MasterAddr, " /\t") {
		bad("master address %q is not a host name or IP address", e.MasterAddr)
	}
	return errors.Join(errs...)
}

// reader collects parse errors so a detector reports all of them at once.
type reader struct {
	lookup Lookup
	errs   []error
}

func (r *reader) has(keys ...string) bool {
	for _, k := range keys {
		if _, ok := r.lookup(k); !ok {
			return false
		}
	}
	return true
}

func (r *reader) str(key string) string {
	v, _ := r.lookup(key)
	return strings.TrimSpace(v)
}

// int reads key; def is used when it is absent.
func (r *reader) int(key string, def int) int {
	v, ok := r.lookup(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q is not a whole number", key, v))
		return def
	}
	return n
}

func (r *reader) port(key string, def int) int {
	v, ok := r.lookup(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > 65535 {
		r.errs = append(r.errs, fmt.Errorf("%s=%q is not a port number (1..65535)", key, v))
		return def
	}
	return n
}

func (r *reader) finish(e Env) (Env, bool, error) {
	if len(r.errs) > 0 {
		return Env{}, true, errors.Join(r.errs...)
	}
	if err := e.Validate(); err != nil {
		return Env{}, true, err
	}
	return e, true, nil
}

// master fills MasterAddr/MasterPort from MASTER_ADDR/MASTER_PORT when set.
func (r *reader) master(e *Env) {
	if a := r.str("MASTER_ADDR"); a != "" {
		e.MasterAddr = a
		e.MasterPort = r.port("MASTER_PORT", 29500)
	}
}

func detectTorchrun(l Lookup) (Env, bool, error) {
	r := &reader{lookup: l}
	if !r.has("RANK", "WORLD_SIZE", "LOCAL_RANK") {
		return Env{}, false, nil
	}
	e := Env{
		Rank:      r.int("RANK", 0),
		WorldSize: r.int("WORLD_SIZE", 1),
		LocalRank: r.int("LOCAL_RANK", 0),
	}
	e.LocalWorldSize = r.int("LOCAL_WORLD_SIZE", e.WorldSize)
	e.NodeRank = r.int("GROUP_RANK", r.int("NODE_RANK", 0))
	if e.LocalWorldSize > 0 {
		e.NumNodes = r.int("NNODES", (e.WorldSize+e.LocalWorldSize-1)/e.LocalWorldSize)
	}
	r.master(&e)
	return r.finish(e)
}

func detectKubeflow(l Lookup) (Env, bool, error) {
	r := &reader{lookup: l}
	if !r.has("KUBERNETES_PORT", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK") {
		return Env{}, false, nil
	}
	e := Env{Rank: r.int("RANK", 0), WorldSize: r.int("WORLD_SIZE", 1), LocalWorldSize: 1}
	e.NodeRank, e.NumNodes = e.Rank, e.WorldSize
	r.master(&e)
	return r.finish(e)
}

func detectOpenMPI(l Lookup) (Env, bool, error) {
	r := &reader{lookup: l}
	if !r.has("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE") {
		return Env{}, false, nil
	}
	e := Env{Rank: r.int("OMPI_COMM_WORLD_RANK", 0), WorldSize: r.int("OMPI_COMM_WORLD_SIZE", 1)}
	e.LocalRank = r.int("OMPI_COMM_WORLD_LOCAL_RANK", 0)
	e.LocalWorldSize = r.int("OMPI_COMM_WORLD_LOCAL_SIZE", 1)
	// Open MPI gives no node index; with the usual equal number of processes
	// per node (mpirun's by-slot mapping), it is rank / processes per node.
	if e.LocalWorldSize > 0 {
		e.NodeRank = e.Rank / e.LocalWorldSize
		e.NumNodes = (e.WorldSize + e.LocalWorldSize - 1) / e.LocalWorldSize
	}
	r.master(&e)
	if e.MasterAddr == "" && e.LocalWorldSize == e.WorldSize {
		// Every rank is on this host (mpirun -np N): rank 0 listens on
		// loopback at a port each rank derives from the job's id, as
		// SLURM's below.
		if id := r.str("OMPI_MCA_ess_base_jobid"); id != "" {
			h := fnv.New32a()
			h.Write([]byte(id))
			port := int(h.Sum32() % 20000)
			if n, err := strconv.ParseUint(id, 10, 64); err == nil {
				port = int(n % 20000)
			}
			e.MasterAddr, e.MasterPort = "127.0.0.1", 10000+port
		}
	}
	return r.finish(e)
}

func detectSLURM(l Lookup) (Env, bool, error) {
	r := &reader{lookup: l}
	if !r.has("SLURM_PROCID", "SLURM_NTASKS") {
		return Env{}, false, nil
	}
	if name, _ := l("SLURM_JOB_NAME"); interactiveSLURM[strings.TrimSpace(name)] {
		// The shell of an interactive allocation (srun --pty bash,
		// salloc) is no rank of a job: what it runs starts its own
		// ranks, as Lightning's SLURMEnvironment decides by this name.
		return Env{}, false, nil
	}
	e := Env{
		Rank:      r.int("SLURM_PROCID", 0),
		WorldSize: r.int("SLURM_NTASKS", 1),
		LocalRank: r.int("SLURM_LOCALID", 0),
		NodeRank:  r.int("SLURM_NODEID", 0),
		NumNodes:  r.int("SLURM_NNODES", r.int("SLURM_JOB_NUM_NODES", 1)),
	}
	e.LocalWorldSize = r.int("SLURM_NTASKS_PER_NODE", 0)
	if e.LocalWorldSize == 0 {
		e.LocalWorldSize = localTasks(r.str("SLURM_TASKS_PER_NODE"), e.NodeRank)
	}
	if e.LocalWorldSize == 0 && e.NumNodes > 0 {
		e.LocalWorldSize = (e.WorldSize + e.NumNodes - 1) / e.NumNodes
	}
	r.master(&e)
	if e.MasterAddr == "" {
		list := r.str("SLURM_JOB_NODELIST")
		if list == "" {
			list = r.str("SLURM_NODELIST")
		}
		if list != "" {
			hosts, err := ExpandHostList(list)
			if err != nil {
				r.errs = append(r.errs, fmt.Errorf("SLURM_JOB_NODELIST: %w", err))
			} else {
				e.MasterAddr = hosts[0]
				e.MasterPort = 10000 + r.int("SLURM_JOB_ID", 0)%20000
			}
		}
	}
	return r.finish(e)
}

// interactiveSLURM are the job names of an interactive allocation's shell.
var interactiveSLURM = map[string]bool{"bash": true, "interactive": true}

// localTasks reads SLURM_TASKS_PER_NODE ("2(x3),1") for node i; 0 when unknown.
func localTasks(s string, node int) int {
	if s == "" {
		return 0
	}
	i := 0
	for _, part := range strings.Split(s, ",") {
		n, rep := part, 1
		if j := strings.Index(part, "(x"); j > 0 && strings.HasSuffix(part, ")") {
			n = part[:j]
			v, err := strconv.Atoi(part[j+2 : len(part)-1])
			if err != nil {
				return 0
			}
			rep = v
		}
		c, err := strconv.Atoi(n)
		if err != nil {
			return 0
		}
		if node < i+rep {
			return c
		}
		i += rep
	}
	return 0
}
