package fsdp_test

import (
	"context"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Two in-process fsdp ranks given to the trainer (Config.StrategyImpl)
// train as one device does: validated after Fit on a fresh value of the
// module, the loss is one device's; a module value that declares other
// tensors is refused, naming the tensor.
func TestFSDPThroughTheTrainer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ds, err := strategytest.Regression(48, in, out, 8)
	if err != nil {
		t.Fatal(err)
	}
	newModel := func() *deepMLP { return &deepMLP{Sizes: []int{in, 10, 6, out}, Opt: "adam", LR: 0.01} }
	fit := func(s strategy.Strategy, batch int) (*trainer.Trainer, map[string]float64) {
		cfg := trainer.Config{MaxEpochs: 2, Seed: 5, Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: t.TempDir()}
		if s != nil {
			cfg.StrategyImpl = s
		}
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		train, _ := data.NewLoader(ds, data.LoaderConfig{BatchSize: batch})
		val, _ := data.NewLoader(ds, data.LoaderConfig{BatchSize: 12})
		if err := tr.Fit(ctx, newModel(), train, nil); err != nil {
			t.Error(err)
			return nil, nil
		}
		res, err := tr.Validate(ctx, newModel(), val)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		return tr, res
	}
	group, err := inproc.NewGroup(2, inproc.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]*trainer.Trainer, 2)
	res := make([]map[string]float64, 2)
	done := make(chan struct{})
	for r := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			s, err := fsdp.New(fsdp.Config{Group: group[r]})
			if err != nil {
				t.Error(err)
				return
			}
			trs[r], res[r] = fit(s, 4)
		}()
	}
	<-done
	<-done
	if t.Failed() {
		t.FailNow()
	}
	_, want := fit(nil, 8)
	for r := range 2 {
		g, w := res[r]["val_loss"], want["val_loss"]
		if math.IsNaN(g) || math.Abs(g-w) > 1e-6+1e-5*math.Abs(w) {
			t.Errorf("rank %d: val_loss after Fit %g, one device %g", r, g, w)
		}
	}
	// Another model: refused before anything runs.
	val, _ := data.NewLoader(ds, data.LoaderConfig{BatchSize: 12})
	errs := make([]error, 2)
	for r := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			_, errs[r] = trs[r].Validate(ctx, &deepMLP{Sizes: []int{in, 11, 6, out}}, val)
		}()
	}
	<-done
	<-done
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), `"fc0.weight"`) {
			t.Errorf("rank %d: Validate with another model: %v, want an error naming fc0.weight", r, err)
		}
	}
	for r := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			errs[r] = trs[r].Teardown(ctx)
		}()
	}
	<-done
	<-done
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: Teardown: %v", r, err)
		}
	}
}
