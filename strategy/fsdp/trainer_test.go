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

// Three in-process fsdp ranks given to the trainer (Config.StrategyImpl)
// train as one device does: validated after Fit on a fresh value of the
// module over 7 rows (padded to 9: a batch of 3 holds a padded row), the loss
// and the predictions are one device's; a module value that declares other
// tensors is refused, naming the tensor.
func TestFSDPThroughTheTrainer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 3
	ds, err := strategytest.Regression(48, in, out, 8)
	if err != nil {
		t.Fatal(err)
	}
	vds, err := strategytest.Regression(7, in, out, 9)
	if err != nil {
		t.Fatal(err)
	}
	var preds [n + 1][]float32
	newModel := func() *deepMLP { return &deepMLP{Sizes: []int{in, 10, 6, out}, Opt: "adam", LR: 0.01} }
	fit := func(s strategy.Strategy, batch, valBatch, slot int) (*trainer.Trainer, map[string]float64) {
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
		val, _ := data.NewLoader(vds, data.LoaderConfig{BatchSize: valBatch})
		if err := tr.Fit(ctx, newModel(), train, nil); err != nil {
			t.Error(err)
			return nil, nil
		}
		res, err := tr.Validate(ctx, newModel(), val)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		ys, err := tr.Predict(ctx, newModel(), val)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		for _, y := range ys {
			preds[slot] = append(preds[slot], y.Float32s()...)
		}
		return tr, res
	}
	group, err := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]*trainer.Trainer, n)
	res := make([]map[string]float64, n)
	done := make(chan struct{})
	each := func(f func(r int)) {
		for r := range n {
			go func() {
				defer func() { done <- struct{}{} }()
				f(r)
			}()
		}
		for range n {
			<-done
		}
	}
	each(func(r int) {
		s, err := fsdp.New(fsdp.Config{Group: group[r]})
		if err != nil {
			t.Error(err)
			return
		}
		trs[r], res[r] = fit(s, 4, 3, r)
	})
	if t.Failed() {
		t.FailNow()
	}
	_, want := fit(nil, 4*n, 7, n)
	for r := range n {
		g, w := res[r]["val_loss"], want["val_loss"]
		if math.IsNaN(g) || math.Abs(g-w) > 1e-6+1e-5*math.Abs(w) {
			t.Errorf("rank %d: val_loss after Fit %g, one device %g", r, g, w)
		}
		if len(preds[r]) != len(preds[n]) {
			t.Fatalf("rank %d: %d predicted values, one device %d", r, len(preds[r]), len(preds[n]))
		}
		for i, w := range preds[n] {
			if g := preds[r][i]; math.Abs(float64(g-w)) > 1e-5+1e-4*math.Abs(float64(w)) {
				t.Errorf("rank %d: prediction value %d is %g, one device %g", r, i, g, w)
			}
		}
	}
	// Another model: refused before anything runs.
	val, _ := data.NewLoader(ds, data.LoaderConfig{BatchSize: 12})
	errs := make([]error, n)
	each(func(r int) { _, errs[r] = trs[r].Validate(ctx, &deepMLP{Sizes: []int{in, 11, 6, out}}, val) })
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), `"fc0.weight"`) {
			t.Errorf("rank %d: Validate with another model: %v, want an error naming fc0.weight", r, err)
		}
	}
	each(func(r int) { errs[r] = trs[r].Teardown(ctx) })
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: Teardown: %v", r, err)
		}
	}
}
