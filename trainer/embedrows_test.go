package trainer_test

import (
	"context"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// bigTable looks up a table of 2^24+1 rows, more than float32 token ids
// count exactly.
type bigTable struct{ emb *nn.Embedding }

func (m *bigTable) Configure(b *module.Builder) error {
	m.emb = nn.NewEmbedding(b, "emb", 1<<24+1, 1)
	return nil
}

func (m *bigTable) TrainingStep(s *module.Step) (*G.Node, error) {
	return G.Mean(m.emb.Forward(s, s.Input("x")))
}

// An Embedding table too large for float32 ids stops Fit with advice that
// names the precision setting as its user knows it (Config.SettingName: a
// cli's "-precision 64"), or by its Go name without one.
func TestEmbeddingTooLargeNamesPrecision(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{2}}}, [][]float32{make([]float32, 16)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      func(string) string
		want, not string
	}{
		{nil, `set Config.Precision "64"`, "-precision"},
		{func(s string) string {
			if s == "Precision" {
				return "-precision"
			}
			return ""
		}, "set -precision 64", "Precision \""},
	} {
		loader, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8})
		if err != nil {
			t.Fatal(err)
		}
		cfg := quietConfig(1)
		cfg.SettingName = c.name
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = tr.Fit(context.Background(), &bigTable{}, loader, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "16777217 rows") || strings.Contains(err.Error(), c.not) {
			t.Errorf("Fit: %v\nwant an error containing %q and 16777217 rows, without %q", err, c.want, c.not)
		}
	}
}
