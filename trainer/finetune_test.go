package trainer_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/trainer"
)

// wfirstBatch records the state at the end of a Fit's first batch.
type wfirstBatch struct {
	seen                bool
	loss                float64
	epoch, step, batchN int
}

func (f *wfirstBatch) Name() string { return "wfirstBatch" }
func (f *wfirstBatch) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if !f.seen {
		f.seen, f.loss, f.epoch, f.step = true, s.Loss, s.Epoch, s.GlobalStep
	}
	return nil
}

// sourceWeights trains a linreg for two epochs and saves a checkpoint of
// it; it returns the checkpoint and the trained weights' store.
func sourceWeights(t *testing.T) (string, *module.Store) {
	t.Helper()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 5}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := tr.Fit(ctx, &linreg{in: 4, lr: 0.05}, loader(t, regression(t, 96, 0.01, 8), 16, true, false), nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "source.ckpt")
	if err := tr.SaveCheckpoint(ctx, path); err != nil {
		t.Fatal(err)
	}
	return path, tr.Store()
}

// TestFitWithWeightsStartsFromTheFile: a second Fit started from the first
// one's weights (its checkpoint, or infer's export) takes its first step at
// the loss those weights give, from epoch 0 with a fresh Adam.
func TestFitWithWeightsStartsFromTheFile(t *testing.T) {
	ctx := context.Background()
	ckpt, src := sourceWeights(t)
	export := filepath.Join(t.TempDir(), "weights.safetensors")
	if err := infer.SaveStateDict(export, src); err != nil {
		t.Fatal(err)
	}
	ds := regression(t, 64, 0.01, 9)
	const lr = 0.01
	// The loss of the source weights on the one batch, by Validate.
	ev, _ := trainer.New(quiet(trainer.Config{Seed: 1}))
	want, err := ev.Validate(ctx, &linreg{in: 4, lr: lr}, loader(t, ds, 64, false, false), trainer.WithCheckpoint(ckpt))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path string }{{"checkpoint", ckpt}, {"infer export", export}} {
		t.Run(tc.name, func(t *testing.T) {
			fb := &wfirstBatch{}
			tr, err := trainer.New(quiet(trainer.Config{MaxSteps: 1, Seed: 1, Callbacks: []trainer.Callback{fb}}))
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Fit(ctx, &linreg{in: 4, lr: lr}, loader(t, ds, 64, false, false), nil, trainer.WithWeights(tc.path)); err != nil {
				t.Fatal(err)
			}
			if math.Abs(fb.loss-want["val_loss"]) > 1e-6*want["val_loss"] {
				t.Errorf("first step's loss %v, the source weights' %v", fb.loss, want["val_loss"])
			}
			if fb.epoch != 0 || fb.step != 1 {
				t.Errorf("first batch at epoch %d, global step %d: want epoch 0, step 1", fb.epoch, fb.step)
			}
			// A fresh Adam's first step moves every parameter by lr (its
			// bias-corrected m/sqrt(v) is the gradient's sign); the
			// source run's Adam state (step 12) would move them otherwise.
			for i, v := range tr.Store().Data32() {
				if d := math.Abs(float64(v - src.Data32()[i])); math.Abs(d-lr) > 1e-4 {
					t.Errorf("parameter %d moved by %g in the first step: want %g, a fresh Adam's", i, d, lr)
				}
			}
		})
	}
	// A float32 file into a float64 model: the values convert exactly.
	fb64 := &wfirstBatch{}
	tr64, _ := trainer.New(quiet(trainer.Config{MaxSteps: 1, Seed: 1, Precision: "64", Callbacks: []trainer.Callback{fb64}}))
	if err := tr64.Fit(ctx, &linreg{in: 4, lr: lr}, loader(t, ds, 64, false, false), nil, trainer.WithWeights(export)); err != nil {
		t.Fatal(err)
	}
	if math.Abs(fb64.loss-want["val_loss"]) > 1e-6*want["val_loss"] {
		t.Errorf("float64 model: first step's loss %v, the source weights' %v", fb64.loss, want["val_loss"])
	}
	// The comparison means something: the initial weights' loss differs.
	fb := &wfirstBatch{}
	tr, _ := trainer.New(quiet(trainer.Config{MaxSteps: 1, Seed: 1, Callbacks: []trainer.Callback{fb}}))
	if err := tr.Fit(ctx, &linreg{in: 4, lr: lr}, loader(t, ds, 64, false, false), nil); err != nil {
		t.Fatal(err)
	}
	if math.Abs(fb.loss-want["val_loss"]) < 0.1 {
		t.Fatalf("the initial weights' loss %v is near the source's %v: the test cannot tell them apart", fb.loss, want["val_loss"])
	}
}

// logTo is a quiet config whose log lines go to buf.
func logTo(buf *bytes.Buffer) trainer.Config {
	l := zerolog.New(buf)
	return quiet(trainer.Config{MaxSteps: 1, Seed: 1, Log: &l})
}

func TestFitWithWeightsMismatches(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name string, specs ...module.Spec) string {
		st, err := module.NewStore(specs, tensor.Float32, 3)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := infer.SaveStateDict(p, st); err != nil {
			t.Fatal(err)
		}
		return p
	}
	w := module.Spec{Name: "w", Shape: []int{4, 1}, Init: module.Normal(0, 1)}
	b := module.Spec{Name: "b", Shape: []int{1}, Init: module.Normal(0, 1)}
	wide := write("wide.safetensors", module.Spec{Name: "w", Shape: []int{4, 2}}, b)
	noB := write("nob.safetensors", w)
	extra := write("extra.safetensors", w, b, module.Spec{Name: "head.w", Shape: []int{3}}, module.Spec{Name: "head.b", Shape: []int{2}})
	other := write("other.safetensors", module.Spec{Name: "head.w", Shape: []int{3}})
	for _, tc := range []struct {
		name string
		opt  trainer.FitOption
		want []string // in the error; none: Fit succeeds
		log  []string // in the log
	}{
		{"wrong shape", trainer.WithWeights(wide), []string{`tensor "w" has shape [4 2] in the file but [4 1] in the model`}, nil},
		{"wrong shape not strict", trainer.WithWeights(wide, trainer.Strict(false)), []string{`tensor "w" has shape [4 2] in the file but [4 1] in the model`}, nil},
		{"missing", trainer.WithWeights(noB), []string{`tensor "b" [1] of the model is missing from the file`, "trainer.Strict(false)"}, nil},
		{"extra", trainer.WithWeights(extra), []string{`the file has tensor "head.b" [2]`, `the file has tensor "head.w" [3]`}, nil},
		{"missing not strict", trainer.WithWeights(noB, trainer.Strict(false)), nil, []string{`"missing_kept_initial":["\"b\" [1]"]`}},
		{"extra not strict", trainer.WithWeights(extra, trainer.Strict(false)), nil, []string{`"unexpected_skipped":["\"head.b\" [2]","\"head.w\" [3]"]`}},
		{"only prefix", trainer.WithWeights(extra, trainer.OnlyPrefix("w")), nil, []string{`"only_prefix":"w","ignored_outside_prefix":3`}},
		{"only prefix missing", trainer.WithWeights(noB, trainer.OnlyPrefix("b")), []string{`tensor "b" [1] of the model is missing from the file`}, nil},
		{"only prefix matching nothing", trainer.WithWeights(extra, trainer.OnlyPrefix("head2.")), []string{`trainer.OnlyPrefix("head2.") matches no tensor of the model (its names: "b", "w")`}, nil},
		{"not strict loading nothing", trainer.WithWeights(other, trainer.Strict(false)), []string{`no tensor of the file matches one of the model by name: the Fit would start from the initial weights`, `the file has tensor "head.w" [3]`, `tensor "w" [4 1] of the model is missing from the file`}, nil},
		{"no file", trainer.WithWeights(filepath.Join(dir, "none.safetensors")), []string{"none.safetensors"}, nil},
		{"torch.save pickle", trainer.WithWeights(writeRaw(t, dir, "m.pt", "PK\x03\x04junk")), []string{"torch.save file", "safetensors.torch.save_file"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tr, err := trainer.New(logTo(&buf))
			if err != nil {
				t.Fatal(err)
			}
			err = tr.Fit(ctx, &linreg{in: 4, lr: 0.01}, loader(t, regression(t, 16, 0.01, 9), 16, false, false), nil, tc.opt)
			if tc.want == nil && err != nil {
				t.Fatalf("Fit: %v", err)
			}
			for _, s := range tc.want {
				if err == nil || !strings.Contains(err.Error(), s) {
					t.Errorf("Fit error %v: want %q in it", err, s)
				}
			}
			for _, s := range tc.log {
				if !strings.Contains(buf.String(), s) {
					t.Errorf("log lacks %q:\n%s", s, buf.String())
				}
			}
		})
	}
}

func writeRaw(t *testing.T, dir, name, content string) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Strict(false) keeps the initial value of what the file lacks, and loads
// the rest: "b" stays the Zeros of Configure, "w" is the file's.
func TestFitWithWeightsNotStrictKeepsInitialValues(t *testing.T) {
	st, err := module.NewStore([]module.Spec{{Name: "w", Shape: []int{4, 1}, Init: module.Normal(5, 1)}}, tensor.Float32, 3)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "w.safetensors")
	if err := infer.SaveStateDict(p, st); err != nil {
		t.Fatal(err)
	}
	for _, opt := range []trainer.FitOption{trainer.WithWeights(p, trainer.Strict(false)), trainer.WithWeights(p, trainer.OnlyPrefix("w"))} {
		m := &linreg{in: 4, lr: 0.01, sgd: true}
		// OnTrainStart sees the loaded weights before any step.
		probe := &weightsProbe{}
		tr, _ := trainer.New(quiet(trainer.Config{MaxSteps: 1, Seed: 1, Callbacks: []trainer.Callback{probe}}))
		if err := tr.Fit(context.Background(), m, loader(t, regression(t, 16, 0.01, 9), 16, false, false), nil, opt); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprint(append(append([]float32(nil), st.Data32()...), 0))
		if probe.got != want {
			t.Errorf("weights at the Fit's start %s, want the file's w and the initial b: %s", probe.got, want)
		}
	}
}

type weightsProbe struct{ got string }

func (p *weightsProbe) Name() string { return "weightsProbe" }
func (p *weightsProbe) OnTrainStart(ctx context.Context, s *trainer.State) error {
	var all []float32
	for _, name := range []string{"w", "b"} {
		v, err := s.Weights.Tensor(name)
		if err != nil {
			return err
		}
		all = append(all, v.Data().([]float32)...)
	}
	p.got = fmt.Sprint(all)
	return nil
}

func TestFitWithWeightsAndFromCheckpointConflict(t *testing.T) {
	tr, _ := trainer.New(quiet(trainer.Config{MaxSteps: 1}))
	err := tr.Fit(context.Background(), &linreg{in: 4}, loader(t, regression(t, 16, 0.01, 9), 16, false, false), nil,
		trainer.FromCheckpoint("a.ckpt"), trainer.WithWeights("b.safetensors"))
	if err == nil || !strings.Contains(err.Error(), `trainer.FromCheckpoint("a.ckpt") and trainer.WithWeights("b.safetensors")`) {
		t.Errorf("err = %v", err)
	}
}

// Every strategy of two in-process ranks starts from the file: the ranks
// take their first step at the loss of the file's weights and end with
// equal weights; a file missing on one rank fails both.
func TestFitWithWeightsEveryStrategy(t *testing.T) {
	ctx := context.Background()
	ckpt, src := sourceWeights(t)
	ds := regression(t, 64, 0.01, 9)
	ev, _ := trainer.New(quiet(trainer.Config{Seed: 1}))
	want, err := ev.Validate(ctx, &linreg{in: 4}, loader(t, ds, 64, false, false), trainer.WithCheckpoint(ckpt))
	if err != nil {
		t.Fatal(err)
	}
	// A file with the source's "w" only: under Strict(false) "b" keeps its
	// initial value, on every rank's part of it. One process on the whole
	// of ds gives the loss to expect.
	wOnly := filepath.Join(t.TempDir(), "w.safetensors")
	wst, err := module.NewStore([]module.Spec{{Name: "w", Shape: []int{4, 1}}}, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	copy(wst.Data32(), src.Data32()[:4])
	if err := infer.SaveStateDict(wOnly, wst); err != nil {
		t.Fatal(err)
	}
	one := &wfirstBatch{}
	tr, _ := trainer.New(quiet(trainer.Config{MaxSteps: 1, Seed: 1, Callbacks: []trainer.Callback{one}}))
	if err := tr.Fit(ctx, &linreg{in: 4, lr: 0.01}, loader(t, ds, 64, false, false), nil, trainer.WithWeights(wOnly, trainer.Strict(false))); err != nil {
		t.Fatal(err)
	}
	if math.Abs(one.loss-want["val_loss"]) < 0.01 {
		t.Fatalf("the loss with the initial b, %v, is near the source's %v: the case cannot tell them apart", one.loss, want["val_loss"])
	}
	cases := []struct {
		name      string
		path      func(rank int) string
		opts      []trainer.WeightsOption
		wantLoss  float64
		wantError bool
	}{
		{"whole", func(int) string { return ckpt }, nil, want["val_loss"], false},
		{"not strict", func(int) string { return wOnly }, []trainer.WeightsOption{trainer.Strict(false)}, one.loss, false},
		{"missing on rank 1", func(r int) string { return ckpt + strings.Repeat(".gone", r) }, nil, 0, true},
	}
	strats := map[string]func(g collective.Collective) (strategy.Strategy, error){
		"ddp": func(g collective.Collective) (strategy.Strategy, error) { return ddp.NewDDP(ddp.DDPConfig{Group: g}) },
		"sharded": func(g collective.Collective) (strategy.Strategy, error) {
			return sharded.New(sharded.Config{Group: g, Stage: 2})
		},
		"fsdp": func(g collective.Collective) (strategy.Strategy, error) { return fsdp.New(fsdp.Config{Group: g}) },
	}
	for name, mk := range strats {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				group, err := inproc.NewGroup(2)
				if err != nil {
					t.Fatal(err)
				}
				errs := make([]error, 2)
				fbs := []*wfirstBatch{{}, {}}
				trs := make([]*trainer.Trainer, 2)
				teardownAtEnd(t, trs, group)
				var wg sync.WaitGroup
				for r := 0; r < 2; r++ {
					s, err := mk(group[r])
					if err != nil {
						t.Fatal(err)
					}
					trs[r], err = trainer.New(quiet(trainer.Config{MaxSteps: 3, Seed: 1, StrategyImpl: s, Callbacks: []trainer.Callback{fbs[r]}, HandleSignals: trainer.Bool(false)}))
					if err != nil {
						t.Fatal(err)
					}
					path := tc.path(r)
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs[r] = trs[r].Fit(ctx, &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), nil, trainer.WithWeights(path, tc.opts...))
					}()
				}
				wg.Wait()
				if tc.wantError {
					for r, err := range errs {
						if err == nil || !strings.Contains(err.Error(), ".gone") && !strings.Contains(err.Error(), "rank 1 could not read it") {
							t.Errorf("rank %d: err = %v, want the missing file named", r, err)
						}
					}
					return
				}
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				// The first step's mean loss over both ranks is the source's
				// on ds.
				if got := (fbs[0].loss + fbs[1].loss) / 2; math.Abs(got-tc.wantLoss) > 1e-5*tc.wantLoss {
					t.Errorf("first step's loss %v (ranks %v, %v), want %v", got, fbs[0].loss, fbs[1].loss, tc.wantLoss)
				}
				if name != "fsdp" { // fsdp's ranks hold a shard each
					if h0, h1 := trs[0].Store().SHA256(), trs[1].Store().SHA256(); h0 != h1 {
						t.Errorf("ranks end with different weights: %s, %s", h0, h1)
					}
				}
			})
		}
	}
}

// torchWeights runs testdata/torch_weights.py on a batch of 64 rows of
// regression data: it returns the directory of the files it wrote, the
// loss PyTorch computes for its weights on the batch, and a loader of
// that batch.
func torchWeights(t *testing.T) (string, float64, *data.Loader) {
	t.Helper()
	py := ""
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import torch").Run() == nil {
			py = path
			break
		}
	}
	if py == "" {
		t.Skip("no python3 with torch (Debian's python3-torch)")
	}
	dir := t.TempDir()
	ds := regression(t, 64, 0.01, 9)
	// The batch, for torch: x [64, 4] and y [64].
	batch, err := module.NewStore([]module.Spec{{Name: "x", Shape: []int{64, 4}}, {Name: "y", Shape: []int{64}}}, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 64; i++ {
		dst := [][]float32{batch.Data32()[4*i : 4*i+4], batch.Data32()[256+i : 256+i+1]}
		if err := ds.Read(i, dst); err != nil {
			t.Fatal(err)
		}
	}
	if err := infer.SaveStateDict(filepath.Join(dir, "batch.safetensors"), batch); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, filepath.Join("testdata", "torch_weights.py"), dir).CombinedOutput()
	if err != nil {
		t.Fatalf("torch_weights.py: %v\n%s", err, out)
	}
	var torchLoss float64
	if _, err := fmt.Sscan(string(out), &torchLoss); err != nil {
		t.Fatalf("torch_weights.py printed %q: %v", out, err)
	}
	return dir, torchLoss, loader(t, ds, 64, false, false)
}

// A state dict written by PyTorch (float64, torch's names) starts a float32
// Fit at the loss PyTorch computes for those weights.
func TestFitWithWeightsFromPyTorch(t *testing.T) {
	dir, torchLoss, l := torchWeights(t)
	fb := &wfirstBatch{}
	tr, _ := trainer.New(quiet(trainer.Config{MaxSteps: 1, Seed: 1, Callbacks: []trainer.Callback{fb}}))
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, l, nil, trainer.WithWeights(filepath.Join(dir, "torch.safetensors"))); err != nil {
		t.Fatal(err)
	}
	if math.Abs(fb.loss-torchLoss) > 1e-5*torchLoss {
		t.Errorf("first step's loss %v, PyTorch's for the same weights %v", fb.loss, torchLoss)
	}
}

// The state_dict() of a wrapped model, as PyTorch writes it (DataParallel
// and DistributedDataParallel: "module.w"; a LightningModule holding the
// net as self.model: "model.w"), loads with StripPrefix, as PyTorch's
// consume_prefix_in_state_dict_if_present: the Fit starts at PyTorch's
// loss for those weights. Without it the error names the option with the
// file's prefix; StripPrefix composes with OnlyPrefix (strip, then filter)
// and Strict(false).
func TestFitWithWeightsStripPrefix(t *testing.T) {
	ctx := context.Background()
	dir, torchLoss, l := torchWeights(t)
	ddp, lit := filepath.Join(dir, "torch_ddp.safetensors"), filepath.Join(dir, "torch_lit.safetensors")
	for _, tc := range []struct {
		name string
		opt  trainer.FitOption
		want []string // in the error; none: Fit starts at torchLoss
		log  []string // in the log
		// partial: only w is loaded, so the loss is not PyTorch's
		partial bool
	}{
		{"ddp", trainer.WithWeights(ddp, trainer.StripPrefix("module.")), nil, []string{`"strip_prefix":"module.","stripped":2`}, false},
		{"lightning", trainer.WithWeights(lit, trainer.StripPrefix("model.")), nil, []string{`"strip_prefix":"model.","stripped":2`}, false},
		{"strip then only prefix", trainer.WithWeights(ddp, trainer.StripPrefix("module."), trainer.OnlyPrefix("w")), nil, []string{`"only_prefix":"w","ignored_outside_prefix":1`}, true},
		{"strip, not strict", trainer.WithWeights(lit, trainer.Strict(false), trainer.StripPrefix("model.")), nil, nil, false},
		{"ddp without strip", trainer.WithWeights(ddp), []string{`tensor "w" [4 1] of the model is missing from the file`, `the file's tensor names start with "module."`, `pass trainer.StripPrefix("module.")`}, nil, false},
		{"lightning without strip", trainer.WithWeights(lit), []string{`the file's tensor names start with "model."`, `pass trainer.StripPrefix("model.")`}, nil, false},
		{"only prefix before strip", trainer.WithWeights(ddp, trainer.OnlyPrefix("module.w")), []string{`pass trainer.StripPrefix("module.")`}, nil, false},
		{"wrong prefix", trainer.WithWeights(ddp, trainer.StripPrefix("model.")), []string{`trainer.StripPrefix("model."): no tensor name of the file starts with "model."`, `pass trainer.StripPrefix("module.")`}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			fb := &wfirstBatch{}
			cfg := logTo(&buf)
			cfg.Callbacks = []trainer.Callback{fb}
			tr, err := trainer.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = tr.Fit(ctx, &linreg{in: 4, lr: 0.01}, l, nil, tc.opt)
			for _, s := range tc.want {
				if err == nil || !strings.Contains(err.Error(), s) {
					t.Errorf("Fit error %v: want %q in it", err, s)
				}
			}
			for _, s := range tc.log {
				if !strings.Contains(buf.String(), s) {
					t.Errorf("log lacks %q:\n%s", s, buf.String())
				}
			}
			if tc.want != nil {
				return
			}
			if err != nil {
				t.Fatalf("Fit: %v", err)
			}
			// With OnlyPrefix("w"), b keeps its initial 0: the loss is
			// PyTorch's only when both were loaded.
			if near := math.Abs(fb.loss-torchLoss) <= 1e-5*torchLoss; near == tc.partial {
				t.Errorf("first step's loss %v, PyTorch's for the same weights %v (only w loaded: %v)", fb.loss, torchLoss, tc.partial)
			}
		})
	}
}

// A file holding a name both with and without the prefix cannot be
// stripped: the error names both.
func TestFitWithWeightsStripPrefixCollision(t *testing.T) {
	st, err := module.NewStore([]module.Spec{{Name: "module.w", Shape: []int{4, 1}}, {Name: "w", Shape: []int{4, 1}}, {Name: "module.b", Shape: []int{1}}}, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "both.safetensors")
	if err := infer.SaveStateDict(p, st); err != nil {
		t.Fatal(err)
	}
	tr, _ := trainer.New(quiet(trainer.Config{MaxSteps: 1, Seed: 1}))
	err = tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, regression(t, 16, 0.01, 9), 16, false, false), nil,
		trainer.WithWeights(p, trainer.StripPrefix("module.")))
	if err == nil || !strings.Contains(err.Error(), `trainer.StripPrefix("module."): the file has both "module.w" and "w"`) {
		t.Errorf("err = %v", err)
	}
}
