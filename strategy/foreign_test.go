package strategy_test

import (
	"fmt"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
)

func storeOf(t *testing.T, prefix string, n int) *module.Store {
	t.Helper()
	var specs []module.Spec
	for i := range n {
		specs = append(specs, module.Spec{Name: fmt.Sprintf("%s%d.weight", prefix, i), Shape: []int{2, 3}, Init: module.Zeros()})
	}
	st, err := module.NewStore(specs, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A checkpoint of another architecture lacks and adds many tensors: the
// error names each kind once, with a count and the first few names, not a
// line per tensor.
func TestForeignCheckpointErrorIsShort(t *testing.T) {
	sd, err := strategy.SaveReplicaState(storeOf(t, "conv", 30), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = strategy.LoadStore(sd, storeOf(t, "fc", 20))
	if err == nil {
		t.Fatal("LoadStore of another model's checkpoint: nil error")
	}
	msg := err.Error()
	for _, want := range []string{
		`20 tensors of the model are missing from the checkpoint ("fc0.weight" [2 3], "fc1.weight" [2 3],`,
		"and 14 more): was it written for another model?",
		`the checkpoint has 30 tensors that the model does not declare ("conv0.weight", "conv1.weight",`,
		"and 24 more): was it written for another model?",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "\n") + 1; n != 2 {
		t.Errorf("error has %d lines, want 2 (one for each kind):\n%s", n, msg)
	}
	// One of a kind keeps its own sentence.
	err = strategy.LoadStore(sd, storeOf(t, "conv", 31))
	if want := `tensor "conv30.weight" [2 3] of the model is missing from the checkpoint`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want %q", err, want)
	}
}
