package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
)

// FashionMNIST's validation, test and predict batches hold max(-batch-size,
// 256) examples, and -h says so beside -batch-size (it said "examples per
// batch", and a run logged 256 where 64 was asked).
func TestFashionMNISTEvalBatchIsAtLeast256(t *testing.T) {
	for _, c := range []struct{ bs, train, eval int }{{64, 64, 256}, {256, 256, 256}, {512, 512, 512}} {
		l, err := (&cli.FashionMNIST{BatchSize: c.bs}).Loaders(1)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Train.Config().BatchSize; got != c.train {
			t.Errorf("-batch-size %d: training batches of %d", c.bs, got)
		}
		for _, e := range []struct {
			name string
			bs   int
		}{{"Val", l.Val.Config().BatchSize}, {"Test", l.Test.Config().BatchSize}, {"Predict", l.Predict.Config().BatchSize}} {
			if e.bs != c.eval {
				t.Errorf("-batch-size %d: %s batches of %d, want %d", c.bs, e.name, e.bs, c.eval)
			}
		}
	}
	var out bytes.Buffer
	app := cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}, Stdout: &out, Stderr: &out}
	_ = app.Run(context.Background(), []string{"-h"})
	i := strings.Index(out.String(), "-batch-size")
	if i < 0 {
		t.Fatalf("-h does not list -batch-size:\n%s", out.String())
	}
	line := out.String()[i:]
	line = line[:strings.Index(line, "\n  -")]
	for _, w := range []string{"training batch", "validation, test and predict", "256"} {
		if !strings.Contains(line, w) {
			t.Errorf("-batch-size's help %q does not say %q", line, w)
		}
	}
}
