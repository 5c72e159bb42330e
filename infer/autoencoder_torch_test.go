package infer_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"os/exec"
	"path/filepath"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

// stepLosses records the training loss of every step.
type stepLosses struct{ losses []float64 }

func (r *stepLosses) Name() string { return "stepLosses" }

func (r *stepLosses) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	v, ok := s.Metrics.Get("train_loss")
	if !ok {
		return fmt.Errorf("no train_loss among %v", s.Metrics.Names())
	}
	r.losses = append(r.losses, v)
	return nil
}

// Example_autoencoder's LitAutoEncoder, initialised by PyTorch and moved to
// fulgur as a state dict, trains in float64 with the default Adam (lr 1e-3)
// as PyTorch's does on the same batches in the same order: every step's loss
// and the final weights agree to 1e-13. (In float32 both stay within float32
// rounding of the float64 run, 3e-7 in the loss over 500 steps, until one
// of them takes another branch at a ReLU or an Adam step near zero.)
func TestAutoencoderTrainsAsPyTorch(t *testing.T) {
	py := python(t)
	const batch, steps = 16, 12
	dir := t.TempDir()
	train, _, err := data.EmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, batch*steps)
	for i := range idx {
		idx[i] = 7 * i // images of every class
	}
	sub, err := data.NewSubset(train, idx)
	if err != nil {
		t.Fatal(err)
	}
	// The batches' pixels, as the loader gives them, for PyTorch.
	xs, err := module.NewStore([]module.Spec{{Name: "x", Shape: []int{len(idx), 784}}}, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range idx {
		if err := sub.Read(i, [][]float32{xs.Data32()[784*i : 784*(i+1)], make([]float32, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := infer.SaveStateDict(filepath.Join(dir, "x.safetensors"), xs); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "torch_autoencoder.py", dir, fmt.Sprint(batch))
	cmd.Dir = "testdata"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("torch_autoencoder.py: %v\n%s", err, out)
	}

	loader, err := data.NewLoader(sub, data.LoaderConfig{BatchSize: batch})
	if err != nil {
		t.Fatal(err)
	}
	rec := &stepLosses{}
	tr, err := trainer.New(trainer.Config{MaxEpochs: 1, Precision: "64", LogDir: filepath.Join(dir, "run"), Deterministic: true, Out: io.Discard,
		DisableCheckpointing: true, DisableLogger: true, EnableProgressBar: trainer.Bool(false), HandleSignals: trainer.Bool(false),
		Callbacks: []trainer.Callback{rec}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Teardown(context.Background())
	if err := tr.Fit(context.Background(), NewLitAutoEncoder(), loader, nil, trainer.WithWeights(filepath.Join(dir, "init.safetensors"))); err != nil {
		t.Fatal(err)
	}

	// PyTorch's numbers, read into stores of the shapes it wrote.
	lossStore, err := module.NewStore([]module.Spec{{Name: "loss", Shape: []int{steps}}}, tensor.Float64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := infer.LoadWeights(filepath.Join(dir, "torch_losses.safetensors"), lossStore); err != nil {
		t.Fatal(err)
	}
	want := lossStore.Data64()
	if len(rec.losses) != steps {
		t.Fatalf("fulgur ran %d steps, want %d", len(rec.losses), steps)
	}
	for i, got := range rec.losses {
		if d := math.Abs(got - want[i]); d > 1e-13*want[i] {
			t.Errorf("step %d: loss %.17g, PyTorch's %.17g (relative difference %.2e)", i, got, want[i], d/want[i])
		}
	}
	if !(want[steps-1] < want[0]) {
		t.Errorf("PyTorch's loss went from %v to %v: the steps did not train", want[0], want[steps-1])
	}
	final := tr.Store()
	torchFinal := final.Clone()
	if err := infer.LoadWeights(filepath.Join(dir, "torch_final.safetensors"), torchFinal); err != nil {
		t.Fatal(err)
	}
	init := final.Clone()
	if err := infer.LoadWeights(filepath.Join(dir, "init.safetensors"), init); err != nil {
		t.Fatal(err)
	}
	moved := 0.0
	for _, e := range final.Entries() {
		for i := e.Offset; i < e.Offset+e.Len; i++ {
			got, w := final.Data64()[i], torchFinal.Data64()[i]
			moved = math.Max(moved, math.Abs(w-init.Data64()[i]))
			if d := math.Abs(got - w); d > 1e-13*(1+math.Abs(w)) {
				t.Errorf("%s[%d] = %.17g after training, PyTorch's %.17g", e.Name, i-e.Offset, got, w)
				break
			}
		}
	}
	if moved < 1e-3 {
		t.Errorf("the weights moved by at most %v in PyTorch's training: nothing to compare", moved)
	}
}
