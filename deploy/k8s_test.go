package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/fulgur-ml/fulgur/deploy"
)

// The parts of the Kubernetes and Kubeflow objects the tests read. Decoding
// is strict, so a misspelt field in a manifest fails here instead of being
// dropped silently by the API server's defaulting.
type (
	envVar struct {
		Name      string `json:"name"`
		Value     string `json:"value,omitempty"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `json:"name"`
				Key  string `json:"key"`
			} `json:"secretKeyRef,omitempty"`
		} `json:"valueFrom,omitempty"`
	}
	container struct {
		Name    string   `json:"name"`
		Image   string   `json:"image"`
		Command []string `json:"command,omitempty"`
		Args    []string `json:"args,omitempty"`
		Env     []envVar `json:"env,omitempty"`
		Ports   []struct {
			Name          string `json:"name"`
			ContainerPort int    `json:"containerPort"`
		} `json:"ports,omitempty"`
		Resources struct {
			Requests map[string]string `json:"requests,omitempty"`
			Limits   map[string]string `json:"limits,omitempty"`
		} `json:"resources"`
	}
	replicaSpec struct {
		Replicas      int    `json:"replicas"`
		RestartPolicy string `json:"restartPolicy"`
		Template      struct {
			Spec struct {
				Containers []container `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	}
	runPolicy struct {
		BackoffLimit   *int   `json:"backoffLimit"`
		CleanPodPolicy string `json:"cleanPodPolicy"`
	}
	meta struct {
		Name string `json:"name"`
	}
	pyTorchJob struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   meta   `json:"metadata"`
		Spec       struct {
			NprocPerNode        string                 `json:"nprocPerNode"`
			RunPolicy           runPolicy              `json:"runPolicy"`
			PyTorchReplicaSpecs map[string]replicaSpec `json:"pytorchReplicaSpecs"`
		} `json:"spec"`
	}
	mpiJob struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   meta   `json:"metadata"`
		Spec       struct {
			SlotsPerWorker    int                    `json:"slotsPerWorker"`
			MPIImplementation string                 `json:"mpiImplementation"`
			SSHAuthMountPath  string                 `json:"sshAuthMountPath"`
			RunPolicy         runPolicy              `json:"runPolicy"`
			MPIReplicaSpecs   map[string]replicaSpec `json:"mpiReplicaSpecs"`
		} `json:"spec"`
	}
)

func decodeManifest(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// podEnv is a container's environment as the pod will see it: the
// manifest's variables, then those added (the operator's win on a repeated
// name, as in Kubernetes the last entry of a name does). A secret reads as
// "secret:NAME/KEY".
func podEnv(t *testing.T, c container, added deploy.Vars) deploy.Vars {
	t.Helper()
	v := deploy.Vars{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			v[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom == nil:
			v[e.Name] = e.Value
		default:
			t.Errorf("container %s: %s comes from a source the test does not model", c.Name, e.Name)
		}
	}
	for k, val := range added {
		v[k] = val
	}
	return v
}

// launcherOwned are variables a launcher or operator sets; a manifest that
// sets them too would be overridden, or would make strategy/cluster see a
// different launcher (LOCAL_RANK turns a pod into a torchrun rank).
var launcherOwned = regexp.MustCompile(`^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|NODE_RANK|MASTER_ADDR|MASTER_PORT|OMPI_COMM_WORLD_.*|SLURM_.*|PET_.*)$`)

// checkContainerEnv checks what every fulgur container needs: the token
// from the shared secret, a backend DDP knows, and one BLAS thread per CPU.
func checkContainerEnv(t *testing.T, c container, blasThreads string) {
	t.Helper()
	v := podEnv(t, c, nil)
	for k := range v {
		if launcherOwned.MatchString(k) {
			t.Errorf("container %s sets %s, which its launcher owns", c.Name, k)
		}
	}
	if v["FULGUR_TOKEN"] != "secret:fulgur-token/token" {
		t.Errorf("container %s: FULGUR_TOKEN is %q, want it from the secret fulgur-token, key token (the README's kubectl create secret)", c.Name, v["FULGUR_TOKEN"])
	}
	if b := v["FULGUR_BACKEND"]; !slices.Contains([]string{"tcp", "auto", "mpi"}, b) {
		t.Errorf("container %s: FULGUR_BACKEND=%q, want tcp, auto or mpi", c.Name, b)
	}
	if v["FULGUR_BLAS_THREADS"] != blasThreads {
		t.Errorf("container %s: FULGUR_BLAS_THREADS=%q, want %s", c.Name, v["FULGUR_BLAS_THREADS"], blasThreads)
	}
}

func checkRunPolicy(t *testing.T, name string, rp runPolicy, specs map[string]replicaSpec) {
	t.Helper()
	// A restarted rank cannot rejoin a running job: it would wait at a
	// rendezvous nobody serves.
	if rp.BackoffLimit == nil || *rp.BackoffLimit != 0 {
		t.Errorf("%s: runPolicy.backoffLimit must be 0", name)
	}
	for role, s := range specs {
		if s.RestartPolicy != "Never" {
			t.Errorf("%s: %s restartPolicy %q, want Never", name, role, s.RestartPolicy)
		}
		if len(s.Template.Spec.Containers) != 1 {
			t.Errorf("%s: %s has %d containers, want 1", name, role, len(s.Template.Spec.Containers))
		}
	}
}

func TestPyTorchJob(t *testing.T) {
	var job pyTorchJob
	decodeManifest(t, "k8s/pytorchjob.yaml", &job)
	if job.APIVersion != "kubeflow.org/v1" || job.Kind != "PyTorchJob" {
		t.Fatalf("%s %s, want kubeflow.org/v1 PyTorchJob", job.APIVersion, job.Kind)
	}
	// With more than one process per pod the operator's RANK is the pod
	// index, not the process's: strategy/cluster's kubeflow reading needs 1.
	if job.Spec.NprocPerNode != "1" {
		t.Errorf("nprocPerNode %q, want \"1\"", job.Spec.NprocPerNode)
	}
	specs := job.Spec.PyTorchReplicaSpecs
	checkRunPolicy(t, job.Metadata.Name, job.Spec.RunPolicy, specs)
	master, worker := specs["Master"], specs["Worker"]
	if len(specs) != 2 || len(master.Template.Spec.Containers) != 1 || len(worker.Template.Spec.Containers) != 1 {
		t.Fatalf("want one Master and one Worker spec of one container each, got %+v", specs)
	}
	mc, wc := master.Template.Spec.Containers[0], worker.Template.Spec.Containers[0]
	port := 0
	for _, p := range mc.Ports {
		if p.Name == "pytorchjob-port" {
			port = p.ContainerPort
		}
	}
	for _, c := range []container{mc, wc} {
		if c.Name != "pytorch" {
			t.Errorf("container %q: the operator looks for the container named pytorch", c.Name)
		}
		if c.Image != mc.Image || !slices.Equal(c.Args, mc.Args) {
			t.Errorf("master and worker run different programs: %s %v and %s %v", mc.Image, mc.Args, c.Image, c.Args)
		}
		if len(c.Command) != 0 {
			t.Errorf("container %s overrides the image's entrypoint with %v", c.Name, c.Command)
		}
		checkContainerEnv(t, c, c.Resources.Limits["cpu"])
	}
	pods, err := deploy.PyTorchJob{Name: job.Metadata.Name, Masters: master.Replicas, Workers: worker.Replicas, MasterPort: port}.Pods()
	if err != nil {
		t.Fatal(err)
	}
	ranks := make([]deploy.Vars, len(pods))
	for r, added := range pods {
		c := wc
		if r < master.Replicas {
			c = mc
		}
		ranks[r] = podEnv(t, c, added)
	}
	checkRanks(t, ranks, program{path: mc.Image, flags: mc.Args}, "kubeflow", job.Metadata.Name+"-master-0", port)
}

func TestMPIJob(t *testing.T) {
	var job mpiJob
	decodeManifest(t, "k8s/mpijob.yaml", &job)
	if job.APIVersion != "kubeflow.org/v2beta1" || job.Kind != "MPIJob" || job.Spec.MPIImplementation != "OpenMPI" {
		t.Fatalf("%s %s (%s), want kubeflow.org/v2beta1 MPIJob with OpenMPI", job.APIVersion, job.Kind, job.Spec.MPIImplementation)
	}
	specs := job.Spec.MPIReplicaSpecs
	checkRunPolicy(t, job.Metadata.Name, job.Spec.RunPolicy, specs)
	launcher, worker := specs["Launcher"], specs["Worker"]
	if launcher.Replicas != 1 || len(launcher.Template.Spec.Containers) != 1 || len(worker.Template.Spec.Containers) != 1 {
		t.Fatalf("want one Launcher replica and a Worker spec, one container each: %+v", specs)
	}
	lc, wc := launcher.Template.Spec.Containers[0], worker.Template.Spec.Containers[0]
	if !slices.Equal(lc.Command, []string{"mpirun"}) || !slices.Equal(wc.Command, []string{"/usr/sbin/sshd", "-De"}) {
		t.Errorf("launcher runs %v, workers %v; want mpirun and /usr/sbin/sshd -De", lc.Command, wc.Command)
	}
	if lc.Image != wc.Image || !strings.HasSuffix(lc.Image, ":mpi") {
		t.Errorf("launcher image %q, worker image %q: want the same image, built with --target mpi (tag :mpi)", lc.Image, wc.Image)
	}
	if !slices.Contains(lc.Args, "--allow-run-as-root") || job.Spec.SSHAuthMountPath != "/root/.ssh" {
		t.Errorf("the mpi image runs as root: want mpirun --allow-run-as-root and sshAuthMountPath /root/.ssh")
	}
	// Two ranks share a worker: one BLAS thread each.
	checkContainerEnv(t, lc, "1")
	if slots, cpus := job.Spec.SlotsPerWorker, wc.Resources.Limits["cpu"]; cpus != fmt.Sprint(slots) {
		t.Errorf("workers have %s CPUs for %d ranks (slotsPerWorker) of one BLAS thread each", cpus, slots)
	}

	// The hostfile the operator writes: one line per worker pod.
	var hosts []deploy.Host
	for i := range worker.Replicas {
		hosts = append(hosts, deploy.Host{Name: fmt.Sprintf("%s-worker-%d.%s.default.svc", job.Metadata.Name, i, job.Metadata.Name), Slots: job.Spec.SlotsPerWorker})
	}
	env := podEnv(t, lc, deploy.Vars{
		"OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile", "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
		"OMPI_MCA_orte_keep_fqdn_hostnames": "true", "KUBERNETES_PORT": "tcp://10.96.0.1:443",
	})
	m, p := mpirunJob(t, lc.Args, env, hosts, "")
	if p.path != mpiImageProgram(t) {
		t.Errorf("mpirun runs %s; the mpi image installs the program at %s", p.path, mpiImageProgram(t))
	}
	ranks, err := m.Ranks()
	if err != nil {
		t.Fatal(err)
	}
	// Rank 0 runs on worker 0, so that is where the tcp rendezvous must be.
	master, port := "", 0
	if addr := ranks[0]["MASTER_ADDR"]; addr != "" {
		if !strings.HasPrefix(hosts[0].Name, addr+".") {
			t.Errorf("MASTER_ADDR %s is not rank 0's host %s", addr, hosts[0].Name)
		}
		master, port = addr, 29500
		if ranks[0]["MASTER_PORT"] != "29500" {
			t.Errorf("MASTER_PORT %q, want 29500", ranks[0]["MASTER_PORT"])
		}
	}
	checkRanks(t, ranks, p, "openmpi", master, port)
	for r, v := range ranks {
		if v["FULGUR_BACKEND"] != env["FULGUR_BACKEND"] || v["FULGUR_BLAS_THREADS"] != "1" {
			t.Errorf("rank %d: FULGUR_BACKEND %q, FULGUR_BLAS_THREADS %q: export them with -x", r, v["FULGUR_BACKEND"], v["FULGUR_BLAS_THREADS"])
		}
	}
	if env["FULGUR_BACKEND"] != "mpi" && master == "" {
		t.Errorf("FULGUR_BACKEND=%s needs MASTER_ADDR exported to every rank", env["FULGUR_BACKEND"])
	}
}

// dockerStage is one FROM ... AS name section of a Dockerfile.
type dockerStage struct {
	base, name string
	lines      []string // instructions after FROM, continuation lines joined
}

func readDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	b, err := os.ReadFile("k8s/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	var stages []dockerStage
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Fields(line); f[0] == "FROM" {
			s := dockerStage{base: f[1]}
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				s.name = f[3]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		}
	}
	return stages
}

func (s dockerStage) find(prefix string) []string {
	var out []string
	for _, l := range s.lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

func stageNamed(t *testing.T, stages []dockerStage, name string) dockerStage {
	t.Helper()
	for _, s := range stages {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("Dockerfile has no stage %q", name)
	return dockerStage{}
}

// mpiImageProgram is where the mpi stage puts the program.
func mpiImageProgram(t *testing.T) string {
	t.Helper()
	cp := stageNamed(t, readDockerfile(t), "mpi").find("COPY --from=build-mpi /out/fulgur ")
	if len(cp) != 1 {
		t.Fatal("the mpi stage does not copy /out/fulgur from build-mpi")
	}
	return strings.Fields(cp[0])[3]
}

var goBuild = regexp.MustCompile(`^RUN (CGO_ENABLED=\d) go build (.*) -o (\S+) \./examples/\$\{EXAMPLE\}$`)

func TestDockerfile(t *testing.T) {
	stages := readDockerfile(t)
	last := stages[len(stages)-1]
	if last.name != "cpu" {
		t.Fatalf("the default (last) stage is %q, want cpu", last.name)
	}
	build, buildMPI := stageNamed(t, stages, "build"), stageNamed(t, stages, "build-mpi")
	if !slices.Contains(build.lines, "ARG EXAMPLE=mlp") {
		t.Error("the build stage has no ARG EXAMPLE=mlp")
	}
	// Every example must build with the same command.
	examples, _ := filepath.Glob("../examples/*/main.go")
	if len(examples) == 0 || !slices.Contains(examples, "../examples/mlp/main.go") {
		t.Fatalf("examples found: %v", examples)
	}
	runs := build.find("RUN CGO_ENABLED")
	if len(runs) != 1 {
		t.Fatalf("the build stage has %d go build lines, want 1", len(runs))
	}
	m := goBuild.FindStringSubmatch(runs[0])
	if m == nil || m[1] != "CGO_ENABLED=0" {
		t.Fatalf("the build stage's command %q is not CGO_ENABLED=0 go build ... -o OUT ./examples/${EXAMPLE}", runs[0])
	}
	out := m[3]
	if cp := last.find("COPY --from=build " + out + " "); len(cp) != 1 || !slices.Contains(last.lines, fmt.Sprintf(`ENTRYPOINT ["%s"]`, strings.Fields(cp[0])[3])) {
		t.Errorf("the cpu stage must copy %s from build and make it the entrypoint: %v", out, last.lines)
	}
	if mm := goBuild.FindStringSubmatch(strings.Join(buildMPI.find("RUN CGO_ENABLED"), "")); mm == nil || mm[1] != "CGO_ENABLED=1" || !strings.Contains(mm[2], "-tags mpi") {
		t.Errorf("build-mpi must build with CGO_ENABLED=1 and -tags mpi: %v", buildMPI.lines)
	}
	mpi := stageNamed(t, stages, "mpi")
	for _, pkg := range []string{"openmpi-bin", "openssh-server", "libopenblas0"} {
		if !strings.Contains(strings.Join(mpi.lines, " "), pkg) {
			t.Errorf("the mpi stage does not install %s", pkg)
		}
	}
}

// TestReadmeMatchesFiles keeps deploy/README.md honest about the files it
// names and the secret the manifests read.
func TestReadmeMatchesFiles(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if !strings.Contains(readme, "kubectl create secret generic fulgur-token --from-literal=token=") {
		t.Error("README.md does not show how to create the secret fulgur-token (key token) the manifests read")
	}
	paths := regexp.MustCompile("deploy/[A-Za-z0-9_./-]*[A-Za-z0-9_]").FindAllString(readme, -1)
	if len(paths) < 5 {
		t.Fatalf("README.md names only %d deploy/ paths: %v", len(paths), paths)
	}
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join("..", p)); err != nil {
			t.Errorf("README.md names %s: %v", p, err)
		}
	}
}
