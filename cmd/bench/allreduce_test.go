package main

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// -bytes, -ranks and -backends select the allreduce configurations, with a
// memcpy row per size; bad values name the flag.
func TestAllreduceOptions(t *testing.T) {
	o, err := parseOptions([]string{"-workload", "allreduce", "-bytes", "262144,1024", "-ranks", "2", "-backends", "tcp,openmpi-tcp"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := allreduceConfigs(o)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cs {
		if c.Impl == "fulgur" && c.Ranks != 2 {
			t.Errorf("%s: ranks %d, want 2", c.Variant, c.Ranks)
		}
		got = append(got, c.Impl+" "+c.Variant)
	}
	joined := strings.Join(got, "; ")
	for _, want := range []string{"memcpy backend=memcpy bytes=262144", "memcpy backend=memcpy bytes=1024", "fulgur backend=tcp bytes=262144", "fulgur backend=tcp bytes=1024"} {
		if !strings.Contains(joined, want) {
			t.Errorf("configurations %q lack %q", joined, want)
		}
	}
	if strings.Contains(joined, "backend=shm") {
		t.Errorf("configurations %q include shm, which -backends left out", joined)
	}
	for _, bad := range [][]string{{"-backends", "gloo"}, {"-bytes", "abc"}, {"-ranks", "0"}} {
		if _, err := parseOptions(append([]string{"-workload", "allreduce"}, bad...)); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: error %v, want one naming %s", bad, err, bad[0])
		}
	}
	o, _ = parseOptions([]string{"-workload", "allreduce", "-bytes", "6"})
	if _, err := allreduceConfigs(o); err == nil || !strings.Contains(err.Error(), "-bytes has 6") {
		t.Errorf("-bytes 6: error %v, want one naming it", err)
	}
}

// Each backend's row gets of_memcpy: its bus bandwidth over the memcpy
// bandwidth of the same size, run by run.
func TestAllreduceDeriveFractionOfMemcpy(t *testing.T) {
	res := func(impl, variant string, ranks int, bw ...float64) *Result {
		r := &Result{Config: Config{Workload: "allreduce", Impl: impl, Variant: variant, Ranks: ranks}}
		for _, b := range bw {
			r.Runs = append(r.Runs, Figures{"busbw_gbps": b})
		}
		return r
	}
	rows := allreduceDerive(&Options{}, []*Result{
		res("memcpy", "backend=memcpy bytes=1024", 0, 20, 10),
		res("fulgur", "backend=tcp bytes=1024", 2, 5, 4),
		res("openmpi", "backend=openmpi-tcp bytes=1024 ranks=2", 0, 10, 2),
	})
	found := false
	for _, r := range rows {
		if r.Labels["backend"] != "tcp" {
			continue
		}
		found = true
		if got, want := r.Figures["of_memcpy"], stat([]float64{0.25, 0.4}); got != want {
			t.Errorf("tcp of_memcpy = %+v, want %+v", got, want)
		}
		if got, want := r.Figures["ratio"], stat([]float64{0.5, 2}); got != want {
			t.Errorf("tcp ratio = %+v, want %+v", got, want)
		}
	}
	if !found {
		t.Fatalf("no tcp row in %+v", rows)
	}
}

// fulgur's ranks are placed as mpirun binds Open MPI's: a core each, round
// robin over the allowed CPUs, when the ranks fit them (both sides
// "bind=core"); beyond them, or with -pin=false, no side is bound.
func TestAllreducePlacement(t *testing.T) {
	cpus := len(allowedCPUs())
	configs := func(args ...string) []Config {
		t.Helper()
		o, err := parseOptions(append([]string{"-workload", "allreduce", "-bytes", "1024"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		cs, err := allreduceConfigs(o)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	check := func(cs []Config, ranks int, bind string) {
		t.Helper()
		n := 0
		for _, c := range cs {
			v := variant(c.Variant)
			r := c.Ranks
			if c.Impl != "fulgur" {
				r, _ = strconv.Atoi(v["ranks"])
			}
			if c.Impl == "memcpy" || r != ranks {
				continue
			}
			n++
			if v["bind"] != bind {
				t.Errorf("%s, %d ranks on %d CPUs: bind=%q, want %q", c.Label(), ranks, cpus, v["bind"], bind)
			}
			if c.Impl == "fulgur" && c.Pinned != (bind == "core") {
				t.Errorf("%s: pinned %v, want %v", c.Label(), c.Pinned, bind == "core")
			}
			if c.Impl == "openmpi" && c.Pinned {
				t.Errorf("%s: the process that runs mpirun is pinned, which would put every Open MPI rank on its core", c.Label())
			}
		}
		if n == 0 {
			t.Errorf("no configurations of %d ranks", ranks)
		}
	}
	_, mpiErr := exec.LookPath("mpirun")
	if cpus >= 2 {
		check(configs("-ranks", "2"), 2, "core")
		check(configs("-ranks", "2", "-pin=false"), 2, "none")
		if mpiErr == nil && !strings.Contains(fmt.Sprint(configs("-ranks", "2", "-backends", "openmpi-tcp")), "bind=core") {
			t.Error("Open MPI's 2 ranks are not bound to a core each")
		}
	}
	check(configs("-ranks", strconv.Itoa(cpus+1)), cpus+1, "none")
}

// mpirun is told the same placement as fulgur's ranks get, and its
// --report-bindings is read back: a placement other than asked is an
// error, not a silent unlike comparison.
func TestMpirunBindings(t *testing.T) {
	if got := mpirunBindArgs("core"); !slices.Equal(got, []string{"--report-bindings", "--map-by", "core", "--bind-to", "core"}) {
		t.Errorf("bind=core: mpirun %v", got)
	}
	if got := mpirunBindArgs("none"); !slices.Equal(got, []string{"--report-bindings", "--bind-to", "none"}) {
		t.Errorf("bind=none: mpirun %v", got)
	}
	// Open MPI 4.1's report on this 2-core host.
	bound := "[vm:27329] MCW rank 0 bound to socket 0[core 0[hwt 0]]: [B/.]\n[vm:27329] MCW rank 1 bound to socket 0[core 1[hwt 0]]: [./B]\n"
	free := "[vm:27345] MCW rank 1 is not bound (or bound to all available processors)\n[vm:27346] MCW rank 0 is not bound (or bound to all available processors)\n"
	both := "[vm:1] MCW rank 0 bound to socket 0[core 0[hwt 0]], socket 0[core 1[hwt 0]]: [B/B]\n[vm:1] MCW rank 1 bound to socket 0[core 0[hwt 0]], socket 0[core 1[hwt 0]]: [B/B]\n"
	same := "[vm:1] MCW rank 0 bound to socket 0[core 0[hwt 0]]: [B/.]\n[vm:1] MCW rank 1 bound to socket 0[core 0[hwt 0]]: [B/.]\n"
	cases := []struct {
		report, bind string
		ranks        int
		err          string
	}{
		{bound, "core", 2, ""},
		{free, "none", 2, ""},
		{both, "none", 2, ""},
		{free, "core", 2, "rank 0 is not bound"},
		{bound, "none", 2, "rank 0 is bound to core(s) [0]"},
		{same, "core", 2, "ranks 0 and 1 share core 0"},
		{bound, "core", 3, "reported 2 of 3 ranks"},
		{"[vm:2] MCW rank 0 bound to socket 0[core 0[hwt 0-1]]: [BB/..]\n", "core", 1, ""},
	}
	for _, c := range cases {
		err := checkBindings(c.report, c.ranks, c.bind)
		if c.err == "" && err != nil {
			t.Errorf("bind=%s, %d ranks, report %q: %v", c.bind, c.ranks, c.report, err)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("bind=%s, %d ranks, report %q: error %v, want one saying %q", c.bind, c.ranks, c.report, err, c.err)
		}
	}
}
