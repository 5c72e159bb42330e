package blas_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/blas"
)

// freshProcessEnv names the case a child process of inFreshProcess runs.
const freshProcessEnv = "FULGUR_TEST_BLAS_FRESH_PROCESS"

// inFreshProcess runs f in a new process of the test binary, which runs
// the calling test again with env added (and no BLAS or thread variables
// of the test's own): Choose and Use act once per process. It returns f's
// error text, "" when f returned nil, and the child's other output.
func inFreshProcess(t *testing.T, name string, env []string, f func() error) (string, string) {
	t.Helper()
	if os.Getenv(freshProcessEnv) == name {
		if err := f(); err != nil {
			fmt.Printf("error: %v\n", err)
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+strings.Split(t.Name(), "/")[0]+"$")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "BLIS_ARCH_TYPE", "BLIS_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "FULGUR_BLAS", "FULGUR_BLAS_THREADS", "FULGUR_WORKERS", "LOCAL_WORLD_SIZE":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(append(cmd.Env, freshProcessEnv+"="+name), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %s: %v: %s", name, err, out)
	}
	before, msg, found := strings.Cut(string(out), "error: ")
	if !found {
		return "", string(out)
	}
	return strings.TrimSpace(msg), before
}

// Choose loads BLIS or OpenBLAS with the variables they read at load
// (BLIS_ARCH_TYPE, BLIS_NUM_THREADS, OPENBLAS_NUM_THREADS) set when the
// program had not set them, and used to leave them set: a program that
// embeds the trainer found them in its environment and passed them to
// every process it started afterwards (another build of BLIS reads
// BLIS_ARCH_TYPE as another configuration).
func TestChooseLeavesTheEnvironmentAlone(t *testing.T) {
	for _, want := range []string{"blis", "openblas"} {
		t.Run(want, func(t *testing.T) {
			msg, out := inFreshProcess(t, "env-"+want, []string{"FULGUR_BLAS=" + want}, func() error {
				before := os.Environ()
				c, err := blas.Choose(zerolog.Nop(), blas.ChooseOptions{})
				if err != nil {
					return err
				}
				after := os.Environ()
				fmt.Printf("chose %s\n", c.Impl.Name())
				if added := added(before, after); len(added) > 0 {
					return fmt.Errorf("Choose left the environment changed: %v", added)
				}
				return nil
			})
			if strings.Contains(msg, "not found") {
				t.Skipf("%s is not installed here: %s", want, msg)
			}
			if msg != "" {
				t.Error(msg)
			}
			t.Log(strings.TrimSpace(out))
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

// mine is a program's own implementation, installed with Use.
type mine struct{ blas.Gonum }

func (mine) Name() string { return "mine" }

// The trainer calls Choose when it first sets a module up, and again for
// every later trainer of the process. An implementation the program
// installed with Use was replaced by the library Choose found, without a
// word; and a later Choose whose configuration asked for another
// implementation or other counts (a sweep setting FULGUR_BLAS or
// FULGUR_BLAS_THREADS before each trainer) got the first choice, without
// a word. Now the program's Use stands, and a later request the process
// cannot give is an error naming it.
func TestChooseKeepsTheProgramsChoiceAndRefusesAnotherLater(t *testing.T) {
	env := func(kv ...string) blas.ChooseOptions {
		return blas.ChooseOptions{Lookup: func(k string) (string, bool) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}}
	}
	t.Run("Use before Choose", func(t *testing.T) {
		msg, _ := inFreshProcess(t, "use", nil, func() error {
			if err := blas.Use(mine{}); err != nil {
				return err
			}
			c, err := blas.Choose(zerolog.Nop(), env())
			if err != nil {
				return err
			}
			if c.Impl.Name() != "mine" || blas.Current().Name() != "mine" {
				return fmt.Errorf("Choose installed %s (in use: %s) over the program's own", c.Impl.Name(), blas.Current().Name())
			}
			return nil
		})
		if msg != "" {
			t.Error(msg)
		}
	})
	t.Run("a later Choose asking for another", func(t *testing.T) {
		msg, _ := inFreshProcess(t, "later", nil, func() error {
			first, err := blas.Choose(zerolog.Nop(), env("FULGUR_BLAS", "gonum"))
			if err != nil {
				return err
			}
			var errs []error
			for _, c := range []struct {
				kv   []string
				want string // in the error; "" for none
			}{
				{nil, ""},
				{[]string{"FULGUR_BLAS", "auto"}, ""},
				{[]string{"FULGUR_BLAS", "gonum"}, ""},
				{[]string{"FULGUR_BLAS", "openblas"}, "FULGUR_BLAS is openblas"},
				{[]string{"FULGUR_BLAS", "gonum", "FULGUR_BLAS_THREADS", "3"}, "FULGUR_BLAS_THREADS is 3"},
				{[]string{"FULGUR_BLAS", "gonum", "FULGUR_WORKERS", "64"}, "FULGUR_WORKERS is 64"},
				{[]string{"FULGUR_BLAS", "fast"}, `FULGUR_BLAS is "fast"`},
			} {
				c2, err := blas.Choose(zerolog.Nop(), env(c.kv...))
				switch {
				case c.want == "" && err != nil:
					errs = append(errs, fmt.Errorf("%v: %v", c.kv, err))
				case c.want == "" && c2.Impl.Name() != first.Impl.Name():
					errs = append(errs, fmt.Errorf("%v: chose %s after %s", c.kv, c2.Impl.Name(), first.Impl.Name()))
				case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
					errs = append(errs, fmt.Errorf("%v: error %v, want one saying %q", c.kv, err, c.want))
				}
			}
			return errors.Join(errs...)
		})
		if msg != "" {
			t.Error(msg)
		}
	})
}
