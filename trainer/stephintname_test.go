package trainer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/trainer"
)

// The dtype hint names the precision setting through Config.SettingName
// (a cli's "-precision 32"), whichever strategy runs the step, and never by
// its Go name there.
func TestStepDtypeHintNamesTheSetting(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{4}}, {Name: "y"}}, [][]float32{make([]float32, 32), make([]float32, 8)})
	if err != nil {
		t.Fatal(err)
	}
	flags := func(s string) string {
		if s == "Precision" {
			return "-precision"
		}
		return ""
	}
	for _, c := range []struct {
		strategy, precision string
		f32                 bool
		want                string
	}{
		{"single", "", false, "a float64 value meets the model's float32 ones (-precision 32): "},
		{"single", "64", true, "a float32 value meets the model's float64 ones (-precision 64): "},
		{"dp", "", false, "(-precision 32): "},
		{"ddp", "", false, "(-precision 32): "},
		{"fsdp", "", false, "(-precision 32): "},
		{"sharded", "", false, "(-precision 32): "},
	} {
		loader, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8})
		if err != nil {
			t.Fatal(err)
		}
		cfg := quietConfig(1)
		cfg.Precision, cfg.Strategy, cfg.Devices, cfg.SettingName = c.precision, c.strategy, 1, flags
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = tr.Fit(context.Background(), &scaled{f32: c.f32}, loader, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Config.Precision") {
			t.Errorf("strategy %s, precision %q: Fit: %v\nwant an error containing %q and no Config.Precision", c.strategy, c.precision, err, c.want)
		}
	}
}
