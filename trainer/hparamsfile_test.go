package trainer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

type linregWithHParams struct{ linreg }

func (m *linregWithHParams) HParams() map[string]any { return map[string]any{"lr": m.lr} }

// As Config.DisableLogger's doc says: the default CSVLogger always writes
// metrics.csv, and hparams.yaml only for a module with HParams.
func TestDefaultLoggerWritesHParamsOnlyForAModuleWithThem(t *testing.T) {
	for _, c := range []struct {
		name string
		m    module.Module
		want bool
	}{
		{"without HParams", &linreg{in: 4, lr: 0.05}, false},
		{"with HParams", &linregWithHParams{linreg{in: 4, lr: 0.05}}, true},
	} {
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir(), DisableCheckpointing: true}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), c.m, loader(t, regression(t, 16, 0.01, 1), 8, false, false), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(tr.LogDir(), "metrics.csv")); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		_, err = os.Stat(filepath.Join(tr.LogDir(), "hparams.yaml"))
		if got := err == nil; got != c.want {
			t.Errorf("%s: hparams.yaml written %v, want %v (%v)", c.name, got, c.want, err)
		}
	}
}
