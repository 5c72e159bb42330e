package trainer_test

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fulgur-ml/fulgur/trainer"
)

const (
	coreWarnChild    = "FULGUR_TEST_CORE_WARN_CHILD"
	coreWarnLauncher = "FULGUR_TEST_CORE_WARN_LAUNCHER"
)

// TestNoCoreWarningForARankALauncherBound: mpirun binds each rank to one
// core, so a rank of a 2-rank job (Devices 2) sees one core in
// runtime.NumCPU; it must not warn that Devices is above the cores (every
// rank did), while a process bound to one core that launches its own 2
// ranks there still does, and so does a rank whose launcher ran on that
// one core (taskset -c 0 torchrun): its ranks inherit the launcher's mask
// and share it. The children run under taskset -c of one core, started by
// this process (the launcher that bound them) or by a launcher under it.
func TestNoCoreWarningForARankALauncherBound(t *testing.T) {
	if os.Getenv(coreWarnChild) != "" {
		var out bytes.Buffer
		if _, err := trainer.New(trainer.Config{Devices: 2, Out: &out}); err != nil {
			t.Fatal(err)
		}
		os.Stderr.Write(out.Bytes())
		return
	}
	if os.Getenv(coreWarnLauncher) != "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestNoCoreWarningForARankALauncherBound$")
		cmd.Env = append(os.Environ(), coreWarnLauncher+"=", coreWarnChild+"=1")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skipf("binds its children with taskset (util-linux): %v", err)
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	if all.Count() < 2 {
		t.Skip("one core: Devices 2 is above the machine's cores, and the warning is right")
	}
	one := -1
	for c := 0; one < 0; c++ {
		if all.IsSet(c) {
			one = c
		}
	}
	torchrun := []string{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"}
	for _, tc := range []struct {
		what string
		env  []string
		warn bool
	}{
		{"rank 1 of 2 under mpirun", []string{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2", coreWarnChild + "=1"}, false},
		{"rank 0 of 2 under torchrun", append(torchrun, coreWarnChild+"=1"), false},
		{"a process that launches its own ranks", []string{coreWarnChild + "=1"}, true},
		{"rank 0 of 2 of a torchrun that runs on that core", append(torchrun, coreWarnLauncher+"=1"), true},
	} {
		cmd := exec.Command("taskset", "-c", strconv.Itoa(one), os.Args[0], "-test.run", "^TestNoCoreWarningForARankALauncherBound$")
		cmd.Env = append(cleanLaunchEnv(), tc.env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.what, err, out)
		}
		if got := strings.Contains(string(out), "Devices is above the number of CPU cores"); got != tc.warn {
			t.Errorf("%s, bound to one core of %d: warned %v, want %v\n%s", tc.what, all.Count(), got, tc.warn, out)
		}
	}
}

// cleanLaunchEnv is the environment without a launcher's variables.
func cleanLaunchEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "PMI") ||
			k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "MASTER_ADDR" || k == "MASTER_PORT" {
			continue
		}
		env = append(env, kv)
	}
	return env
}
