package strategytest

import (
	"fmt"
	"math"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
)

// reference trains the suite's MLP with plain float64 loops: no graph, no
// engine, no optim package. It is the independent answer the equivalence
// checks compare every strategy against, single included. init is the
// store's initial contents (parameters then buffers) as laid out by store;
// steps holds, per optimizer step, the global batch of the accumulation
// window (the mean over its rows is the loss, as the strategies compute it).
func reference(store *module.Store, init []float64, m *MLP, so strategy.OptimizerOptions, steps []*data.Batch) ([]float64, error) {
	p := append([]float64(nil), init...)
	at := func(name string) []float64 {
		e, _ := store.Lookup(name)
		return p[e.Offset : e.Offset+e.Len]
	}
	for _, name := range []string{"w1", "b1", "w2", "b2", "scale"} {
		if _, ok := store.Lookup(name); !ok {
			return nil, fmt.Errorf("reference: the store has no %q", name)
		}
	}
	w1, b1, w2, b2, scale := at("w1"), at("b1"), at("w2"), at("b2"), at("scale")
	nP := store.NumParams()
	lr := m.LR
	if lr == 0 {
		lr = 0.05
	}
	mom := make([]float64, nP) // SGD momentum buffer, Adam's first moment
	sq := make([]float64, nP)  // Adam's second moment
	In, H, O := m.In, m.Hidden, m.Out
	for k, b := range steps {
		g := make([]float64, len(p)) // gradients laid out like p
		gw1, gb1 := g[offset(store, "w1"):], g[offset(store, "b1"):]
		gw2, gb2 := g[offset(store, "w2"):], g[offset(store, "b2"):]
		x, y := b.Data[0], b.Data[1]
		n := float64(b.Size * O)
		h := make([]float64, H)
		for r := 0; r < b.Size; r++ {
			for j := 0; j < H; j++ {
				s := b1[j]
				for i := 0; i < In; i++ {
					s += float64(x[r*In+i]) * w1[i*H+j]
				}
				h[j] = math.Max(s, 0)
			}
			dh := make([]float64, H)
			for o := 0; o < O; o++ {
				s := b2[o]
				for j := 0; j < H; j++ {
					s += h[j] * w2[j*O+o]
				}
				dOut := 2 * (s*scale[o] - float64(y[r*O+o])) / n * scale[o]
				gb2[o] += dOut
				for j := 0; j < H; j++ {
					gw2[j*O+o] += h[j] * dOut
					dh[j] += w2[j*O+o] * dOut
				}
			}
			for j := 0; j < H; j++ {
				if h[j] <= 0 {
					continue
				}
				gb1[j] += dh[j]
				for i := 0; i < In; i++ {
					gw1[i*H+j] += float64(x[r*In+i]) * dh[j]
				}
			}
		}
		g = g[:nP]
		if so.ClipValue > 0 {
			for i := range g {
				g[i] = math.Max(-so.ClipValue, math.Min(so.ClipValue, g[i]))
			}
		}
		if so.ClipNorm > 0 {
			norm := 0.0
			for _, v := range g {
				norm += v * v
			}
			if c := so.ClipNorm / (math.Sqrt(norm) + 1e-6); c < 1 {
				for i := range g {
					g[i] *= c
				}
			}
		}
		t := float64(k + 1)
		for i := range g {
			switch m.Optimizer {
			case "", "sgd": // torch.optim.SGD, momentum 0.9, no dampening
				if k == 0 {
					mom[i] = g[i]
				} else {
					mom[i] = 0.9*mom[i] + g[i]
				}
				p[i] -= lr * mom[i]
			case "adam": // torch.optim.Adam, betas (0.9, 0.999), eps 1e-8
				mom[i] = 0.9*mom[i] + 0.1*g[i]
				sq[i] = 0.999*sq[i] + 0.001*g[i]*g[i]
				bc1, bc2 := 1-math.Pow(0.9, t), 1-math.Pow(0.999, t)
				p[i] -= lr / bc1 * mom[i] / (math.Sqrt(sq[i])/math.Sqrt(bc2) + 1e-8)
			default:
				return nil, fmt.Errorf("reference: optimizer %q", m.Optimizer)
			}
		}
	}
	return p, nil
}

func offset(s *module.Store, name string) int {
	e, _ := s.Lookup(name)
	return e.Offset
}

// storeFloats returns a store's contents as float64, whatever its dtype.
func storeFloats(s *module.Store) []float64 {
	if d := s.Data64(); d != nil {
		return append([]float64(nil), d...)
	}
	d := s.Data32()
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v)
	}
	return out
}
