package infer_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// tinyMLP is 16-12-5 with ReLU; testdata/torch_check.py builds the same.
type tinyMLP struct{ fc1, fc2 *nn.Linear }

func (m *tinyMLP) Configure(b *module.Builder) error {
	m.fc1 = nn.NewLinear(b, "fc1", 16, 12, nn.LinearReLU())
	m.fc2 = nn.NewLinear(b, "fc2", 12, 5)
	return nil
}

func (m *tinyMLP) logits(s *module.Step) *G.Node {
	x := G.Must(G.Reshape(s.Input("x"), []int{s.BatchSize(), 16}))
	return m.fc2.Forward(s, m.fc1.Forward(s, x))
}

func (m *tinyMLP) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.CrossEntropy(m.logits(s), s.Input("y")), nil
}

func (m *tinyMLP) PredictStep(s *module.Step) (*G.Node, error) { return m.logits(s), nil }

// tinyResNet is nn.ResNet with widths 4, 8 and 5 classes.
type tinyResNet struct{ net *nn.ResNet }

func (m *tinyResNet) Configure(b *module.Builder) error {
	m.net = nn.NewResNet(b, nn.ResNetConfig{Widths: []int{4, 8}, NumClasses: 5})
	return nil
}

func (m *tinyResNet) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.CrossEntropy(m.net.Forward(s, s.Input("x")), s.Input("y")), nil
}

func (m *tinyResNet) PredictStep(s *module.Step) (*G.Node, error) {
	return m.net.Forward(s, s.Input("x")), nil
}

// tinyLN is 16-12-5 with LayerNorm and GELU between; testdata/torch_check.py
// builds the same.
type tinyLN struct {
	fc1, fc2 *nn.Linear
	ln       *nn.LayerNorm
	act      *nn.GELU
}

func (m *tinyLN) Configure(b *module.Builder) error {
	m.fc1 = nn.NewLinear(b, "fc1", 16, 12)
	m.ln = nn.NewLayerNorm(b, "ln", []int{12})
	m.act = nn.NewGELU(b, "act")
	m.fc2 = nn.NewLinear(b, "fc2", 12, 5)
	return nil
}

func (m *tinyLN) logits(s *module.Step) *G.Node {
	x := G.Must(G.Reshape(s.Input("x"), []int{s.BatchSize(), 16}))
	return m.fc2.Forward(s, m.act.Forward(s, m.ln.Forward(s, m.fc1.Forward(s, x))))
}

func (m *tinyLN) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.CrossEntropy(m.logits(s), s.Input("y")), nil
}

func (m *tinyLN) PredictStep(s *module.Step) (*G.Node, error) { return m.logits(s), nil }

var archs = []struct {
	name string
	new  func() module.Module
}{
	{"mlp", func() module.Module { return &tinyMLP{} }},
	{"resnet", func() module.Module { return &tinyResNet{} }},
	{"lnmlp", func() module.Module { return &tinyLN{} }},
}

var xField = data.Field{Name: "x", Shape: []int{1, 4, 4}}

func randomX(seed uint64, rows int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, rows*16)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// train fits m for a few steps on random data, so its weights and
// BatchNorm statistics are neither the initial ones nor symmetric.
func train(t *testing.T, m module.Module, precision string) *trainer.Trainer {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 5))
	n := 48
	y := make([]float32, n)
	for i := range y {
		y[i] = float32(r.IntN(5))
	}
	ds, err := data.NewInMemory([]data.Field{xField, {Name: "y"}}, [][]float32{randomX(4, n), y})
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8, Shuffle: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(trainer.Config{MaxSteps: 5, Seed: 3, Precision: precision, Out: io.Discard, DefaultRootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), m, l, nil); err != nil {
		t.Fatal(err)
	}
	return tr
}

func predict(t *testing.T, m *infer.Model, x []float32) []float64 {
	t.Helper()
	b, err := m.Batch(len(x)/16, x)
	if m.Store().Dtype() == tensor.Float64 {
		x64 := make([]float64, len(x))
		for i, v := range x {
			x64[i] = float64(v)
		}
		b, err = m.Batch64(len(x)/16, x64)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Predict(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return values(out)
}

func values(d *tensor.Dense) []float64 {
	switch v := d.Data().(type) {
	case []float32:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	case []float64:
		return append([]float64(nil), v...)
	}
	return nil
}

// A state dict written by SaveStateDict loads into a fresh value of the
// same module type (other seed) and predicts exactly what the trained model
// does; so does the trainer's checkpoint.
func TestSaveLoadRoundTrip(t *testing.T) {
	for _, a := range archs {
		t.Run(a.name, func(t *testing.T) {
			tr := train(t, a.new(), "64")
			dir := t.TempDir()
			sd, ck := filepath.Join(dir, "w.safetensors"), filepath.Join(dir, "last.ckpt")
			if err := infer.SaveStateDict(sd, tr.Store()); err != nil {
				t.Fatal(err)
			}
			if err := tr.SaveCheckpoint(context.Background(), ck); err != nil {
				t.Fatal(err)
			}
			x := randomX(9, 6)
			// The trained weights, read straight from the trainer's store.
			ref, err := infer.New(a.new(), infer.Config{Inputs: []data.Field{xField}, Precision: "64", Seed: 77, InitialWeights: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := ref.Store().CopyFrom(tr.Store()); err != nil {
				t.Fatal(err)
			}
			want := predict(t, ref, x)
			fresh, err := infer.New(a.new(), infer.Config{Inputs: []data.Field{xField}, Precision: "64", Seed: 77, InitialWeights: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := predict(t, fresh, x); sameValues(got, want) {
				t.Fatal("a fresh model predicts what the trained one does: the test cannot tell weights apart")
			}
			for _, path := range []string{sd, ck} {
				m, err := infer.New(a.new(), infer.Config{Inputs: []data.Field{xField}, Precision: "64", Seed: 77, Weights: path})
				if err != nil {
					t.Fatal(err)
				}
				if m.Store().SHA256() != tr.Store().SHA256() {
					t.Errorf("%s: loaded weights differ from the trained ones", filepath.Base(path))
				}
				if got := predict(t, m, x); !sameValues(got, want) {
					t.Errorf("%s: predictions %v, want %v", filepath.Base(path), got[:5], want[:5])
				}
			}
		})
	}
}

func sameValues(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The file holds PyTorch's names, layouts and dtypes.
func TestStateDictLayout(t *testing.T) {
	m, err := infer.New(&tinyResNet{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := infer.SaveStateDict(path, m.Store()); err != nil {
		t.Fatal(err)
	}
	hdr := header(t, path)
	for name, want := range map[string]string{
		"conv1.weight":                              "F32 [4 1 3 3]",
		"bn1.num_batches_tracked":                   "I64 []",
		"layer2.0.downsample.1.running_var":         "F32 [8]",
		"layer2.0.downsample.1.num_batches_tracked": "I64 []",
		"fc.weight":                                 "F32 [5 8]",
		"fc.bias":                                   "F32 [5]",
	} {
		e, ok := hdr[name]
		if !ok {
			t.Errorf("%s is missing", name)
			continue
		}
		if got := fmt.Sprintf("%s %v", e.Dtype, e.Shape); got != want {
			t.Errorf("%s is %s, want %s", name, got, want)
		}
	}
	if len(hdr) != len(m.Store().Entries()) {
		t.Errorf("the file has %d tensors, the model %d", len(hdr), len(m.Store().Entries()))
	}
}

type entry struct {
	Dtype string `json:"dtype"`
	Shape []int  `json:"shape"`
}

func header(t *testing.T, path string) map[string]entry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]entry{}
	for k, v := range raw {
		if k == "__metadata__" {
			continue
		}
		var e entry
		if err := json.Unmarshal(v, &e); err != nil {
			t.Fatal(err)
		}
		out[k] = e
	}
	return out
}

// A file for another architecture is refused with every mismatch named,
// and the store is left as it was.
func TestLoadWeightsMismatch(t *testing.T) {
	dir := t.TempDir()
	save := func(name string, specs []module.Spec) string {
		st, err := module.NewStore(specs, tensor.Float32, 1)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := infer.SaveStateDict(p, st); err != nil {
			t.Fatal(err)
		}
		return p
	}
	path := save("other.safetensors", []module.Spec{
		{Name: "fc1.weight", Shape: []int{16, 12}}, // [in, out]: the old layout
		{Name: "fc1.bias", Shape: []int{12}},
		{Name: "fc3.weight", Shape: []int{5, 12}},
	})
	m, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	before := m.Store().SHA256()
	err = infer.LoadWeights(path, m.Store())
	if err == nil {
		t.Fatal("a file of another architecture loaded")
	}
	for _, want := range []string{
		`tensor "fc1.weight" has shape [16 12] in the file but [12 16] in the model: it is transposed`,
		`tensor "fc2.weight" [5 12] of the model is missing from the file`,
		`tensor "fc2.bias" [5] of the model is missing from the file`,
		`the file has tensor "fc3.weight" that the model does not declare`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	if m.Store().SHA256() != before {
		t.Error("a refused file changed the store")
	}
	if _, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, Weights: path}); err == nil || !strings.Contains(err.Error(), "fc3.weight") {
		t.Errorf("New with a mismatched file: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := infer.New(&tinyMLP{}, infer.Config{Precision: "16", Inputs: []data.Field{{Name: "x", Shape: []int{0}}}})
	for _, want := range []string{`Precision is "16"`, `Inputs[0] ("x") has shape [0]`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	// No weights named: an error, not a model that predicts from random
	// weights (a Trainer's LastModelPath is "" when it saved no checkpoint).
	_, err = infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, Weights: ""})
	if err == nil || !strings.Contains(err.Error(), `Weights is "": name the checkpoint`) || !strings.Contains(err.Error(), "InitialWeights") {
		t.Errorf("New without Weights: %v, want an error naming Weights and InitialWeights", err)
	}
	_, err = infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, Weights: "w.safetensors", InitialWeights: true})
	if err == nil || !strings.Contains(err.Error(), "use one") {
		t.Errorf("New with Weights and InitialWeights: %v, want an error", err)
	}
	m, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Batch(2, make([]float32, 31)); err == nil || !strings.Contains(err.Error(), `field "x" holds 31 values; 2 rows of shape [1 4 4] need 32`) {
		t.Errorf("short batch: %v", err)
	}
	// A nil context is an error, not a crash in the engine.
	b, err := m.Batch(2, make([]float32, 32))
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context
	if _, err := m.Predict(nilCtx, b); err == nil || !strings.Contains(err.Error(), "the context is nil") {
		t.Errorf("Predict(nil context): %v", err)
	}
}

// python finds an interpreter with torch, or skips the test saying why.
func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		if exec.Command(path, "-c", "import torch").Run() == nil {
			return path
		}
	}
	t.Skip("no python3 with torch (Debian's python3-torch): the PyTorch interchange test needs it")
	return ""
}

func runPython(t *testing.T, py string, args ...string) {
	t.Helper()
	out, err := exec.Command(py, append([]string{filepath.Join("testdata", "torch_check.py")}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("torch_check.py %v: %v\n%s", args, err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// saveX writes the input batch as a safetensors file with one tensor "x".
func saveX(t *testing.T, dir string, x []float32, precision string) {
	t.Helper()
	dt := tensor.Float32
	if precision == "64" {
		dt = tensor.Float64
	}
	st, err := module.NewStore([]module.Spec{{Name: "x", Shape: []int{len(x) / 16, 1, 4, 4}}}, dt, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range x {
		if d := st.Data32(); d != nil {
			d[i] = v
		} else {
			st.Data64()[i] = float64(v)
		}
	}
	if err := infer.SaveStateDict(filepath.Join(dir, "x.safetensors"), st); err != nil {
		t.Fatal(err)
	}
}

// readY reads torch's output [rows, 5] with LoadWeights.
func readY(t *testing.T, dir string, rows int) []float64 {
	t.Helper()
	st, err := module.NewStore([]module.Spec{{Name: "y", Shape: []int{rows, 5}}}, tensor.Float64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := infer.LoadWeights(filepath.Join(dir, "torch_y.safetensors"), st); err != nil {
		t.Fatal(err)
	}
	return append([]float64(nil), st.Data64()...)
}

func closeTo(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		worst = math.Max(worst, math.Abs(got[i]-want[i])/math.Max(1, math.Abs(want[i])))
	}
	if worst > tol || math.IsNaN(worst) {
		t.Errorf("%s: fulgur and PyTorch differ by %.3g (relative), more than %.3g\nfulgur %v\ntorch  %v", what, worst, tol, got[:5], want[:5])
	}
}

// Weights move both ways between fulgur and PyTorch: (a) fulgur trains a
// few steps and exports; torch loads the file with
// load_state_dict(strict=True) and predicts the same batch; (b) torch
// saves a state dict (BatchNorm statistics updated); fulgur imports it and
// predicts what torch predicted.
func TestPyTorchInterchange(t *testing.T) {
	py := python(t)
	for _, a := range archs {
		for _, precision := range []string{"64", "32"} {
			tol := 1e-12
			if precision == "32" {
				tol = 1e-5
			}
			t.Run(a.name+"/"+precision, func(t *testing.T) {
				x := randomX(11, 7)
				in := []data.Field{xField}

				dir := t.TempDir()
				saveX(t, dir, x, precision)
				tr := train(t, a.new(), precision)
				if err := infer.SaveStateDict(filepath.Join(dir, "fulgur.safetensors"), tr.Store()); err != nil {
					t.Fatal(err)
				}
				m, err := infer.New(a.new(), infer.Config{Inputs: in, Precision: precision, Weights: filepath.Join(dir, "fulgur.safetensors")})
				if err != nil {
					t.Fatal(err)
				}
				runPython(t, py, "load", a.name, precision, dir)
				closeTo(t, "fulgur to torch", predict(t, m, x), readY(t, dir, 7), tol)

				dir = t.TempDir()
				saveX(t, dir, x, precision)
				runPython(t, py, "save", a.name, precision, dir)
				m, err = infer.New(a.new(), infer.Config{Inputs: in, Precision: precision, Weights: filepath.Join(dir, "torch.safetensors")})
				if err != nil {
					t.Fatal(err)
				}
				closeTo(t, "torch to fulgur", predict(t, m, x), readY(t, dir, 7), tol)
			})
		}
	}
}

// PyTorch state dicts may hold half, bfloat16 and integer tensors, and
// 0-dimensional scalars where fulgur keeps [1]: each converts to the
// store's dtype.
func TestLoadWeightsDtypes(t *testing.T) {
	hdr := `{"w":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},` +
		`"b":{"dtype":"BF16","shape":[1],"data_offsets":[6,8]},` +
		`"n":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}`
	var b []byte
	b = binary.LittleEndian.AppendUint64(b, uint64(len(hdr)))
	b = append(b, hdr...)
	for _, h := range []uint16{0x3e00, 0xc000, 0x0001} { // 1.5, -2, 2^-24
		b = binary.LittleEndian.AppendUint16(b, h)
	}
	b = binary.LittleEndian.AppendUint16(b, 0x4040) // 3.0
	b = binary.LittleEndian.AppendUint64(b, 7)
	path := filepath.Join(t.TempDir(), "torch.safetensors")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := module.NewStore([]module.Spec{{Name: "w", Shape: []int{3}}, {Name: "b", Shape: []int{1}}, {Name: "n", Shape: []int{1}, Buffer: true}}, tensor.Float64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := infer.LoadWeights(path, st); err != nil {
		t.Fatal(err)
	}
	if got, want := st.Data64(), []float64{1.5, -2, math.Ldexp(1, -24), 3, 7}; !sameValues(got, want) {
		t.Errorf("loaded %v, want %v", got, want)
	}
}

// A cut or foreign file is an error that says so, never a panic.
func TestLoadWeightsTruncated(t *testing.T) {
	m, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	full := filepath.Join(dir, "w.safetensors")
	if err := infer.SaveStateDict(full, m.Store()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"short", b[:5], "shorter than the 8-byte header length"},
		{"cut header", b[:40], "truncated, corrupt, or not safetensors"},
		{"cut data", b[:len(b)-4], "the file is truncated"},
		{"text", []byte("this is not a weights file at all"), "not safetensors"},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := infer.LoadWeights(p, m.Store()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
