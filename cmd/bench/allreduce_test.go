package main

import (
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
