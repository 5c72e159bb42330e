package infer_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A service that predicts with a Model and later trains (fine-tuning) in
// the same process: the Trainer starts. Before, the first prediction ran
// its multiplies on gonum, settling the process's BLAS, and a Trainer
// choosing OpenBLAS or BLIS then failed with "blas: Use was called after
// the first matrix multiply". The order matters only in a fresh process,
// so the test runs itself in one.
func TestTrainerAfterPredict(t *testing.T) {
	if os.Getenv("FULGUR_INFER_TEST_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTrainerAfterPredict$", "-test.count=1")
		cmd.Env = append(os.Environ(), "FULGUR_INFER_TEST_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "PASS") {
			t.Fatalf("in a fresh process: %v\n%s", err, out)
		}
		return
	}
	m, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	predict(t, m, randomX(1, 3))
	tr, err := trainer.New(trainer.Config{MaxSteps: 1, Out: io.Discard, DefaultRootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := data.NewInMemory([]data.Field{xField, {Name: "y"}}, [][]float32{randomX(2, 8), make([]float32, 8)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &tinyMLP{}, l, nil); err != nil {
		t.Fatalf("Fit after a Model predicted: %v", err)
	}
}
