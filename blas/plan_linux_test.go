package blas_test

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A rank its launcher bound to cores of its own keeps them: a child that
// taskset binds to half of this process's cores, announced as one of 4
// local ranks by torchrun's variables, shares them with the ranks on them
// (4 × its cores / this process's, rounded up), not with all 4; its plan
// says so.
func TestBoundRankKeepsItsCores(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skipf("binds a child with taskset (util-linux): %v", err)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []string
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, strconv.Itoa(c))
		}
	}
	if len(cpus) < 2 {
		t.Skipf("this process may use %d core: a child cannot be bound to fewer", len(cpus))
	}
	half := len(cpus) / 2
	const ranks = 4
	shared := (ranks*half + len(cpus) - 1) / len(cpus)
	kv, log := runChooseUnder(t, []string{"taskset", "-c", strings.Join(cpus[:half], ",")}, "FULGUR_BLAS=gonum", "GOMAXPROCS=",
		"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1", fmt.Sprintf("LOCAL_WORLD_SIZE=%d", ranks), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500")
	want := fmt.Sprint(max(1, half/shared))
	say := fmt.Sprintf("%d local ranks, %d on these cores (bound by the launcher)", ranks, shared)
	if kv["cores"] != want || !strings.Contains(log, say) {
		t.Errorf("bound to %d of %d cores as 1 of %d local ranks: budget %s cores, want %s (the %d cores over %d ranks); log should say %q:\n%s",
			half, len(cpus), ranks, kv["cores"], want, half, shared, say, log)
	}
}
