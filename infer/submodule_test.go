package infer_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// subAE is an autoencoder of 6 features through 2: its loss is on its own
// input; its PredictStep reconstructs.
type subAE struct{ enc, dec *Sequential2 }

func newSubAE() *subAE {
	return &subAE{enc: &Sequential2{In: 6, Hid: 4, Out: 2}, dec: &Sequential2{In: 2, Hid: 4, Out: 6}}
}

func (m *subAE) Configure(b *module.Builder) error {
	if err := m.enc.Configure(b.Scope("encoder")); err != nil {
		return err
	}
	return m.dec.Configure(b.Scope("decoder"))
}

func (m *subAE) reconstruct(s *module.Step) *G.Node {
	return m.dec.Forward(s, m.enc.Forward(s, s.Input("x")))
}

func (m *subAE) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.MSELoss(m.reconstruct(s), s.Input("x")), nil
}

func (m *subAE) PredictStep(s *module.Step) (*G.Node, error) { return m.reconstruct(s), nil }

// subEncoder is the encoder alone, declared under the autoencoder's scope,
// as Lightning's model.encoder after load_from_checkpoint.
type subEncoder struct {
	scope string
	enc   *Sequential2
}

func (m *subEncoder) Configure(b *module.Builder) error {
	if m.scope != "" {
		b = b.Scope(m.scope)
	}
	m.enc = &Sequential2{In: 6, Hid: 4, Out: 2}
	return m.enc.Configure(b)
}

func (m *subEncoder) TrainingStep(s *module.Step) (*G.Node, error) {
	return nil, fmt.Errorf("not trained")
}

func (m *subEncoder) PredictStep(s *module.Step) (*G.Node, error) {
	return m.enc.Forward(s, s.Input("x")), nil
}

// TestSubModuleWeights takes the encoder out of a trained autoencoder's
// checkpoint and out of its state dict with WeightsOptions, as Lightning
// users call model.encoder(x): the encoder's tensors are the trained ones,
// the decoder's are ignored, and a prefix that matches nothing is an error.
func TestSubModuleWeights(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	x := randomX(6, 16)[:16*6] // 16 rows of 6 features
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{6}}}, [][]float32{x})
	if err != nil {
		t.Fatal(err)
	}
	loader, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(trainer.Config{MaxEpochs: 1, Seed: 3, Out: io.Discard, DefaultRootDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Teardown(ctx)
	if err := tr.Fit(ctx, newSubAE(), loader, nil); err != nil {
		t.Fatal(err)
	}
	ckpt, err := trainer.ResolveCheckpoint(dir, "last")
	if err != nil {
		t.Fatal(err)
	}
	sd := filepath.Join(dir, "ae.safetensors")
	if err := infer.SaveStateDict(sd, tr.Store()); err != nil {
		t.Fatal(err)
	}
	trained := tr.Store()
	inputs := []data.Field{{Name: "x", Shape: []int{6}}}

	// Without an option, the decoder's tensors are unexpected: an error
	// that says how to load a part of the file.
	_, err = infer.New(&subEncoder{scope: "encoder"}, infer.Config{Inputs: inputs, Weights: ckpt})
	if err == nil || !strings.Contains(err.Error(), "decoder.0.weight") || !strings.Contains(err.Error(), "WeightsOptions") {
		t.Fatalf("the whole checkpoint into the encoder alone: got %v, want an error naming decoder.0.weight and WeightsOptions", err)
	}

	for _, c := range []struct {
		name, file, scope string
		opts              []trainer.WeightsOption
	}{
		{"checkpoint OnlyPrefix", ckpt, "encoder", []trainer.WeightsOption{trainer.OnlyPrefix("encoder.")}},
		{"state dict OnlyPrefix", sd, "encoder", []trainer.WeightsOption{trainer.OnlyPrefix("encoder.")}},
		{"state dict StripPrefix not strict", sd, "", []trainer.WeightsOption{trainer.StripPrefix("encoder."), trainer.Strict(false)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := infer.New(&subEncoder{scope: c.scope}, infer.Config{Inputs: inputs, Weights: c.file, WeightsOptions: c.opts, Seed: 99})
			if err != nil {
				t.Fatal(err)
			}
			st := m.Store()
			if len(st.Entries()) != 4 {
				t.Fatalf("the encoder has %d tensors, want 4", len(st.Entries()))
			}
			for _, e := range st.Entries() {
				full := e.Name
				if c.scope == "" {
					full = "encoder." + e.Name
				}
				te, ok := trained.Lookup(full)
				if !ok {
					t.Fatalf("%s: not in the trained model", full)
				}
				got := st.Data32()[e.Offset : e.Offset+e.Len]
				want := trained.Data32()[te.Offset : te.Offset+te.Len]
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%s[%d] = %v, the trained %s is %v", e.Name, i, got[i], full, want[i])
					}
				}
			}
			b, err := m.Batch(16, x)
			if err != nil {
				t.Fatal(err)
			}
			z, err := m.Predict(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			if s := z.Shape(); len(s) != 2 || s[0] != 16 || s[1] != 2 {
				t.Fatalf("embedding shape %v, want (16, 2)", s)
			}
		})
	}

	_, err = infer.New(&subEncoder{scope: "encoder"}, infer.Config{Inputs: inputs, Weights: sd, WeightsOptions: []trainer.WeightsOption{trainer.OnlyPrefix("enc.")}})
	if err == nil || !strings.Contains(err.Error(), `"enc."`) {
		t.Fatalf("OnlyPrefix(\"enc.\"): got %v, want an error naming the prefix", err)
	}
}
