package replica_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

// shareCoresChild makes the test binary choose the BLAS (with the
// launcher's variables given in it, "KEY=V,KEY=V") and share the cores
// between 2 local ranks, as a DDP rank does at Setup, logging to stderr:
// Choose plans once per process.
const shareCoresChild = "FULGUR_REPLICA_TEST_SHARE_CORES"

func TestShareCoresChild(t *testing.T) {
	spec, ok := os.LookupEnv(shareCoresChild)
	if !ok {
		t.Skip("run by TestOneThreadsLinePerPlan")
	}
	env := map[string]string{"FULGUR_BLAS": "gonum"}
	for _, kv := range strings.Split(spec, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	log := zerolog.New(os.Stderr).Level(zerolog.InfoLevel)
	if _, err := blas.Choose(log, blas.ChooseOptions{Lookup: cluster.MapLookup(env)}); err != nil {
		t.Fatal(err)
	}
	replica.ShareCores(log, 2)()
}

// A rank logs the plan of threads it trains with once: a launcher's
// rank, planned for its 2 local ranks when it chose the BLAS, said the
// same "threads: ..." line twice (Choose's, then ShareCores's); rank 0 of
// a job DDP launched itself, which chose alone and then shared the cores,
// said two plans alike, the first no longer true. Now the first says one
// line; the second's second line says it is the plan it trains with.
func TestOneThreadsLinePerPlan(t *testing.T) {
	for _, tc := range []struct {
		name, launcher string
		lines          int
	}{
		{"rank of a launcher with 2 local ranks", "RANK=1,WORLD_SIZE=2,LOCAL_RANK=1,LOCAL_WORLD_SIZE=2,MASTER_ADDR=127.0.0.1,MASTER_PORT=29500", 1},
		{"rank 0 that starts its local ranks itself", "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestShareCoresChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), shareCoresChild+"="+tc.launcher)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if out, err := cmd.Output(); err != nil {
				t.Fatalf("child: %v\n%s%s", err, out, stderr.String())
			}
			var lines []string
			for _, l := range strings.Split(stderr.String(), "\n") {
				if strings.Contains(l, `"message":"threads`) {
					lines = append(lines, l)
				}
			}
			if len(lines) != tc.lines {
				t.Fatalf("%d lines about threads, want %d:\n%s", len(lines), tc.lines, strings.Join(lines, "\n"))
			}
			last := lines[len(lines)-1]
			if !strings.Contains(last, "2 local ranks") {
				t.Errorf("the last line about threads does not plan for the 2 local ranks the rank trains beside:\n%s", last)
			}
			if tc.lines == 2 && (!strings.Contains(last, "threads while training: ") || !strings.Contains(last, fmt.Sprintf("shared between %d local ranks", 2))) {
				t.Errorf("the plan that replaces the first does not say so:\n%s", strings.Join(lines, "\n"))
			}
		})
	}
}
