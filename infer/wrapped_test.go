package infer_test

import (
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
)

// A state dict saved from a model wrapped in DistributedDataParallel or
// DataParallel names every tensor "module.<name>": the error says so and
// what to save instead, besides listing the names.
func TestLoadWeightsOfAWrappedModelsStateDict(t *testing.T) {
	specs := []module.Spec{
		{Name: "module.fc1.weight", Shape: []int{12, 16}},
		{Name: "module.fc1.bias", Shape: []int{12}},
		{Name: "module.fc2.weight", Shape: []int{5, 12}},
		{Name: "module.fc2.bias", Shape: []int{5}},
	}
	st, err := module.NewStore(specs, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ddp.safetensors")
	if err := infer.SaveStateDict(p, st); err != nil {
		t.Fatal(err)
	}
	_, err = infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, Weights: p})
	if err == nil {
		t.Fatal("loaded")
	}
	for _, want := range []string{`"module."`, "model.module.state_dict()", `the file has tensor "module.fc1.weight"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nwant it to contain %q", err, want)
		}
	}
}

// Weights naming a directory, or "last" as trainer.WithCheckpoint takes
// it, is an error that says what to pass.
func TestWeightsThatAreNoFile(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ weights, want string }{
		{dir, "is a directory: the weights are a file: name a checkpoint in the directory"},
		{"last", `pass trainer.ResolveCheckpoint(root, "last")`},
		{"best", `pass trainer.ResolveCheckpoint(root, "best")`},
	} {
		_, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, Weights: c.weights})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Weights %q: %v\nwant it to contain %q", c.weights, err, c.want)
		}
	}
}
