package trainer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Ranks of one job given different settings (two machines started with
// different flags) fail, every one of them, naming the setting and both
// values. Each case trained before without an error, each rank with its own
// setting: the collectives matched (as many batches, as many parameters).
func TestRanksWithDifferentSettingsFail(t *testing.T) {
	ds := regression(t, 500, 0.1, 9)
	for _, tc := range []struct {
		name  string
		rank1 func(*trainer.Config, **data.Loader)
		want  string
	}{
		{"batch size", func(_ *trainer.Config, l **data.Loader) { *l = loader(t, ds, 16, true, false) },
			"training loader's BatchSize is 16 on rank 1, 32 on rank 0"},
		{"gradient clipping", func(c *trainer.Config, _ **data.Loader) { c.GradientClipVal = 0.5 },
			"Config.GradientClipVal is 0.5 on rank 1, 0 on rank 0"},
		{"a program's flag", func(c *trainer.Config, _ **data.Loader) { c.SameOnEveryRank = map[string]any{"-width": 16} },
			"-width is 16 on rank 1, 8 on rank 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loaders := []*data.Loader{loader(t, ds, 32, true, false), nil}
			_, errs := onRanks(t, 2, ddpRank(t), func(r int) trainer.Config {
				cfg := quiet(trainer.Config{MaxEpochs: 1, LimitTrainBatches: 3, Seed: 21, SameOnEveryRank: map[string]any{"-width": 8}})
				loaders[r] = loader(t, ds, 32, true, false)
				if r == 1 {
					tc.rank1(&cfg, &loaders[1])
				}
				return cfg
			}, func(r int, tr *trainer.Trainer) error {
				return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loaders[r], nil)
			})
			for r, err := range errs {
				for _, want := range []string{"the ranks were started with different settings: ranks [1] differ from rank 0", tc.want} {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("rank %d: error %v, want one containing %q", r, err, want)
					}
				}
			}
		})
	}
}

// A warning about the job's settings, which every rank has alike, is
// printed once for the job, by rank 0 (it was printed by every rank: four
// copies of each line on two machines of two ranks).
func TestSettingsWarningsOnRankZeroOnly(t *testing.T) {
	ds := regression(t, 500, 0.1, 9)
	root := t.TempDir()
	outs := []*lockedBuffer{{}, {}}
	_, errs := onRanks(t, 2, ddpRank(t), func(r int) trainer.Config {
		cfg := quiet(trainer.Config{MaxEpochs: 1, LimitTrainBatches: 3, LogEveryNSteps: 50, ValCheckInterval: 10, Seed: 21, DefaultRootDir: root})
		cfg.Out = outs[r]
		return cfg
	}, func(r int, tr *trainer.Trainer) error {
		return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 32, true, false), loader(t, ds, 100, false, false))
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for _, w := range []string{"LogEveryNSteps is above the epoch's optimizer steps", "ValCheckInterval is above the epoch's training batches"} {
		if !strings.Contains(outs[0].String(), w) {
			t.Errorf("rank 0's log lacks %q:\n%s", w, outs[0])
		}
		if strings.Contains(outs[1].String(), w) {
			t.Errorf("rank 1's log repeats %q:\n%s", w, outs[1])
		}
	}
}
