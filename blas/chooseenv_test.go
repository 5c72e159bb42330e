package blas_test

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/blas"
)

// chooseEnvChild marks the process TestChooseLeavesTheEnvironmentAlone
// starts: Choose runs once per process, so each case runs in a fresh one.
const chooseEnvChild = "FULGUR_TEST_CHOOSE_ENV_CHILD"

// Choose loads BLIS or OpenBLAS with the variables they read at load
// (BLIS_ARCH_TYPE, BLIS_NUM_THREADS, OPENBLAS_NUM_THREADS) set when the
// program had not set them, and used to leave them set: a program that
// embeds the trainer found them in its environment and passed them to
// every process it started afterwards (another build of BLIS reads
// BLIS_ARCH_TYPE as another configuration).
func TestChooseLeavesTheEnvironmentAlone(t *testing.T) {
	if os.Getenv(chooseEnvChild) != "" {
		before := os.Environ()
		c, err := blas.Choose(zerolog.Nop(), blas.ChooseOptions{})
		if err != nil {
			fmt.Printf("choose: %v\n", err)
			os.Exit(3)
		}
		after := os.Environ()
		slices.Sort(before)
		slices.Sort(after)
		fmt.Printf("impl %s threads %d\n", c.Impl.Name(), c.Threads)
		if !slices.Equal(before, after) {
			fmt.Printf("environment changed: before %d variables, after %d: %v\n", len(before), len(after), added(before, after))
			os.Exit(2)
		}
		os.Exit(0)
	}
	for _, want := range []string{"blis", "openblas"} {
		t.Run(want, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestChooseLeavesTheEnvironmentAlone$")
			for _, kv := range os.Environ() {
				k, _, _ := strings.Cut(kv, "=")
				switch k {
				case "BLIS_ARCH_TYPE", "BLIS_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "FULGUR_BLAS", "FULGUR_BLAS_THREADS":
					continue
				}
				cmd.Env = append(cmd.Env, kv)
			}
			cmd.Env = append(cmd.Env, chooseEnvChild+"=1", "FULGUR_BLAS="+want)
			out, err := cmd.CombinedOutput()
			if err != nil && strings.Contains(string(out), "not found") {
				t.Skipf("%s is not installed here: %s", want, out)
			}
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// added lists the entries of after that are not in before.
func added(before, after []string) []string {
	var out []string
	for _, kv := range after {
		if !slices.Contains(before, kv) {
			out = append(out, kv)
		}
	}
	return out
}
