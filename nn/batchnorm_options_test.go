package nn_test

import (
	"math"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// BatchNormMomentum(0) is PyTorch's momentum=0: training normalises with
// the batch's statistics and leaves the running ones as they are (it was
// taken for the default 0.1). Reference: torch 1.13,
//
//	bn = torch.nn.BatchNorm1d(2, momentum=0.0).double(); bn.train()
//	x = torch.tensor([[1., -2], [3, 0], [-1, 4]], dtype=torch.float64)
//	y = bn(x); print(y, bn.running_mean, bn.running_var, bn.num_batches_tracked)
func TestBatchNormMomentumZeroKeepsRunningStats(t *testing.T) {
	for _, dt := range dtypes {
		var bn *nn.BatchNorm
		m := newModel(t, dt, func(b *module.Builder) { bn = nn.NewBatchNorm1d(b, "bn", 2, nn.BatchNormMomentum(0)) })
		x := randT(dt, 1, 0, 1, 3, 2)
		set(x, func(i int) float64 { return []float64{1, -2, 3, 0, -1, 4}[i] })
		y := m.run(t, module.Train, x, bn.Forward)
		tol := 1e-12
		if dt == tensor.Float32 {
			tol = 1e-6
		}
		closeTo(t, dt.String()+" output", y, []float64{0, -1.0690441085967413, 1.2247425750014138, -0.2672610271491853, -1.2247425750014138, 1.3363051357459266}, tol)
		closeTo(t, dt.String()+" running_mean", storeVals(t, m.store, "bn.running_mean"), []float64{0, 0}, 0)
		closeTo(t, dt.String()+" running_var", storeVals(t, m.store, "bn.running_var"), []float64{1, 1}, 0)
		closeTo(t, dt.String()+" num_batches_tracked", storeVals(t, m.store, "bn.num_batches_tracked"), []float64{1}, 0)
	}
}

// A momentum or eps PyTorch would not take, or that the layer would
// silently replace with its default, is an error of Specs naming the layer,
// the value and the range.
func TestBatchNormRejectsBadMomentumAndEps(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []nn.BatchNormOption
		want string
	}{
		{"NaN momentum", []nn.BatchNormOption{nn.BatchNormMomentum(math.NaN())}, `nn.BatchNorm2d "bn": momentum is NaN: want a value in [0, 1]`},
		{"negative momentum", []nn.BatchNormOption{nn.BatchNormMomentum(-0.1)}, `momentum is -0.1: want a value in [0, 1]`},
		{"momentum above 1", []nn.BatchNormOption{nn.BatchNormMomentum(1.5)}, `momentum is 1.5: want a value in [0, 1]`},
		{"eps 0", []nn.BatchNormOption{nn.BatchNormEps(0)}, `nn.BatchNorm2d "bn": eps is 0: want a finite value > 0 (PyTorch's default 1e-5)`},
		{"negative eps", []nn.BatchNormOption{nn.BatchNormEps(-1e-5)}, `eps is -1e-05: want a finite value > 0`},
		{"infinite eps", []nn.BatchNormOption{nn.BatchNormEps(math.Inf(1))}, `eps is +Inf: want a finite value > 0`},
		{"fixed and cumulative", []nn.BatchNormOption{nn.BatchNormCumulative(), nn.BatchNormMomentum(0)}, `BatchNormMomentum(0) and BatchNormCumulative are both given`},
	} {
		b := module.NewBuilder(dtypes[0])
		nn.NewBatchNorm2d(b, "bn", 3, c.opts...)
		_, err := b.Specs()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
	// The limits themselves are fine.
	b := module.NewBuilder(dtypes[0])
	nn.NewBatchNorm2d(b, "a", 3, nn.BatchNormMomentum(1), nn.BatchNormEps(1e-12))
	nn.NewBatchNorm2d(b, "b", 3, nn.BatchNormMomentum(0))
	if _, err := b.Specs(); err != nil {
		t.Fatal(err)
	}
}
