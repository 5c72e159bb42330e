package ops

import (
	"fmt"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

// Inputs of the PyTorch reference values below.
var (
	lossX    = []float64{0.5, -1.25, 2.0, 3.5, 0.0, -0.75}
	lossY    = []float64{1.0, -0.5, 0.25, 0.0, 0.1, -2.0}
	lossT    = []float64{1.0, 0.0, 1.0, 0.0, 1.0, 0.3} // BCE targets
	lossBig  = []float64{40, -60, 0, -800, 800, 1e-3}  // BCE logits that overflow a naive exp
	lossPosW = []float64{2.0, 0.5, 3.0}                // pos_weight per class (last axis)
	lossXY   = func(k LossKind) []float64 {
		return map[bool][]float64{true: lossT, false: lossY}[k == LossBCEWithLogits]
	}
)

// Values from PyTorch 1.13 (torch.nn.functional, float64) on x = lossX,
// y = lossY (t = lossT for BCE), both of shape [2, 3]:
//
//	F.mse_loss(x, y, reduction=r), F.l1_loss, F.smooth_l1_loss(beta=b),
//	F.huber_loss(delta=d), F.binary_cross_entropy_with_logits(x, t, pos_weight=p)
var lossCases = []struct {
	name string
	cfg  PointLossConfig
	x    []float64
	mean float64
	sum  float64
	none []float64
}{
	{"mse", PointLossConfig{Kind: LossMSE}, lossX, 2.949583333333333, 17.697499999999998,
		[]float64{0.25, 0.5625, 3.0625, 12.25, 0.010000000000000002, 1.5625}},
	{"l1", PointLossConfig{Kind: LossL1}, lossX, 1.3083333333333333, 7.85,
		[]float64{0.5, 0.75, 1.75, 3.5, 0.1, 1.25}},
	{"smoothl1 beta=1", PointLossConfig{Kind: LossSmoothL1, Param: 1}, lossX, 0.901875, 5.41125,
		[]float64{0.125, 0.28125, 1.25, 3.0, 0.005000000000000001, 0.75}},
	{"smoothl1 beta=0.5", PointLossConfig{Kind: LossSmoothL1, Param: 0.5}, lossX, 1.085, 6.51,
		[]float64{0.25, 0.5, 1.5, 3.25, 0.010000000000000002, 1.0}},
	{"huber delta=1", PointLossConfig{Kind: LossHuber, Param: 1}, lossX, 0.901875, 5.41125,
		[]float64{0.125, 0.28125, 1.25, 3.0, 0.005000000000000001, 0.75}},
	{"huber delta=2", PointLossConfig{Kind: LossHuber, Param: 2}, lossX, 1.2872916666666667, 7.72375,
		[]float64{0.125, 0.28125, 1.53125, 5.0, 0.005000000000000001, 0.78125}},
	{"bce", PointLossConfig{Kind: LossBCEWithLogits}, lossX, 0.9479504469193197, 5.687702681515918,
		[]float64{0.4740769841801067, 0.25192908134537295, 0.1269280110429726, 3.5297504182726205, 0.6931471805599453, 0.6118710061149001}},
	{"bce pos_weight", PointLossConfig{Kind: LossBCEWithLogits, PosWeight: lossPosW}, lossX, 1.125197450195156, 6.751184701170937,
		[]float64{0.9481539683602134, 0.25192908134537295, 0.38078403312891784, 3.5297504182726205, 0.34657359027997264, 1.29399360978384}},
	{"bce large logits", PointLossConfig{Kind: LossBCEWithLogits}, lossBig, 0.23108241435331425, 1.3864944861198856,
		[]float64{0, 0, 0.6931471805599453, 0, 0, 0.6933473055599402}},
}

// lossSplits are the ways a loss's six values are summed in the tests
// below: as one sum; in partial sums of 4 values (the second chunk starts
// mid-row, at another PosWeight class); of 2 and of 1 value, split between
// three loop workers.
var lossSplits = []lossSplit{{"whole", 1 << 16, 1}, {"chunks of 4", 4, 1}, {"chunks of 2 on 3 workers", 2, 3}, {"chunks of 1 on 3 workers", 1, 3}}

type lossSplit struct {
	name           string
	chunk, workers int
}

// withLossSplit runs f with the loss summed as s says.
func withLossSplit(s lossSplit, f func()) {
	defer func(g int, w func() int, lc int) {
		parallelGrain, maxWorkers, lossChunk = g, w, lc
	}(parallelGrain, maxWorkers, lossChunk)
	lossChunk, parallelGrain, maxWorkers = s.chunk, 1, func() int { return s.workers }
	f()
}

func TestPointLossMatchesPyTorch(t *testing.T) {
	for _, s := range lossSplits {
		withLossSplit(s, func() { pointLossMatchesPyTorch(t, s.name) })
	}
}

func pointLossMatchesPyTorch(t *testing.T, split string) {
	for _, dt := range dtypes {
		for _, c := range lossCases {
			x, y := fromF64(dt, c.x, 2, 3), fromF64(dt, lossXY(c.cfg.Kind), 2, 3)
			for _, r := range []struct {
				red  Reduction
				want []float64
			}{{ReduceMean, []float64{c.mean}}, {ReduceSum, []float64{c.sum}}, {ReduceNone, c.none}} {
				cfg := c.cfg
				cfg.Reduction = r.red
				got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return PointLoss(in[0], in[1], cfg) }, x, y)
				assertClose(t, fmt.Sprintf("%s %v %v, %s", c.name, r.red, dt, split), got, r.want, tol(dt))
			}
		}
	}
}

// The gradient of BCEWithLogits with pos_weight and of a summed Huber loss
// against PyTorch's autograd (x.grad after backward()).
func TestPointLossGradMatchesPyTorch(t *testing.T) {
	for _, s := range lossSplits {
		withLossSplit(s, func() { pointLossGradMatchesPyTorch(t, s.name) })
	}
}

func pointLossGradMatchesPyTorch(t *testing.T, split string) {
	for _, dt := range dtypes {
		for _, c := range []struct {
			name string
			cfg  PointLossConfig
			want []float64
		}{
			{"bce pos_weight mean", PointLossConfig{Kind: LossBCEWithLogits, PosWeight: lossPosW},
				[]float64{-0.1258468895993818, 0.03711668980421814, -0.05960146101105882, 0.16178129487477394, -0.041666666666666664, -0.06444765311343813}},
			{"huber delta=2 sum", PointLossConfig{Kind: LossHuber, Param: 2, Reduction: ReduceSum},
				[]float64{-0.5, -0.75, 1.75, 2.0, -0.1, 1.25}},
		} {
			g := G.NewGraph()
			x := node(g, fromF64(dt, lossX, 2, 3), "x")
			y := node(g, fromF64(dt, lossXY(c.cfg.Kind), 2, 3), "y")
			loss, err := PointLoss(x, y, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			grads, err := G.Grad(loss, x)
			if err != nil {
				t.Fatal(err)
			}
			m := G.NewTapeMachine(g)
			if err := m.RunAll(); err != nil {
				t.Fatal(err)
			}
			assertClose(t, c.name+" grad "+dt.String()+", "+split, vals(grads[0].Value()), c.want, tol(dt))
			m.Close()
		}
	}
}

func TestPointLossGrad(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range lossCases {
			for _, red := range []Reduction{ReduceMean, ReduceSum, ReduceNone} {
				cfg := c.cfg
				cfg.Reduction = red
				y := randT(dt, 2, -2, 2, 4, 3)
				if cfg.Kind == LossBCEWithLogits {
					y = randT(dt, 2, 0, 1, 4, 3)
				}
				check(t, gradcheck.Case{Name: fmt.Sprintf("%s/%v/%v", c.name, red, dt), Seed: 7,
					Inputs: []*tensor.Dense{randT(dt, 1, -3, 3, 4, 3), y}, NoGrad: []int{1},
					Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return PointLoss(in[0], in[1], cfg) }})
			}
		}
	}
}

func TestPointLossBadInput(t *testing.T) {
	g := G.NewGraph()
	x := node(g, fromF64(tensor.Float64, lossX, 2, 3), "x")
	y := node(g, fromF64(tensor.Float64, lossY, 2, 3), "y")
	y6 := node(g, fromF64(tensor.Float64, lossY, 6), "y6")
	for _, c := range []struct {
		cfg  PointLossConfig
		y    *G.Node
		want string
	}{
		{PointLossConfig{Kind: LossMSE}, y6, "MSELoss: input has shape (2, 3) but target has (6)"},
		{PointLossConfig{Kind: LossHuber}, y, "HuberLoss: delta is 0: want a finite delta > 0"},
		{PointLossConfig{Kind: LossSmoothL1, Param: -1}, y, "SmoothL1Loss: beta is -1"},
		{PointLossConfig{Kind: LossBCEWithLogits, PosWeight: []float64{1, 2}}, y, "PosWeight has 2 values but the input's last axis has 3"},
		{PointLossConfig{Kind: LossBCEWithLogits, PosWeight: []float64{-1}}, y, "PosWeight[0] is -1"},
		{PointLossConfig{Kind: LossMSE, PosWeight: []float64{1}}, y, "PosWeight is for BCEWithLogits only"},
		{PointLossConfig{Kind: LossMSE, Reduction: 7}, y, "unknown reduction Reduction(7)"},
	} {
		_, err := PointLoss(x, c.y, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want it to contain %q", c.cfg, err, c.want)
		}
	}
}

// A loss over no elements (a batch of 0 rows) sums to 0, as PyTorch's
// reduction='sum', rather than failing on its empty list of partial sums.
func TestPointLossOfNoElements(t *testing.T) {
	for _, dt := range dtypes {
		g := G.NewGraph()
		x := G.NewTensor(g, dt, 2, G.WithShape(0, 3), G.WithValue(tensor.New(tensor.Of(dt), tensor.WithShape(0, 3))))
		y := G.NewTensor(g, dt, 2, G.WithShape(0, 3), G.WithValue(tensor.New(tensor.Of(dt), tensor.WithShape(0, 3))))
		l, err := PointLoss(x, y, PointLossConfig{Kind: LossMSE, Reduction: ReduceSum})
		if err != nil {
			t.Fatal(err)
		}
		m := G.NewTapeMachine(g)
		if err := m.RunAll(); err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		if got := vals(l.Value()); len(got) != 1 || got[0] != 0 {
			t.Fatalf("%v: sum over no elements = %v, want 0", dt, got)
		}
		m.Close()
	}
}
