package strategytest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
)

// ride checks strategy.TrainOptions.Ride: a strategy either leaves Rode
// false (the caller then reduces the values itself) or, on every process
// and at every step, calls Sample once per synced step, after the step's
// BeforeBackward, and hands back the values summed over the processes,
// with the weights of the same steps without a ride, bit for bit.
// Accumulation windows of two micro-batches: only the synced one carries
// a ride. so are the optimizer steps' options (with ClipNorm, DDP waits
// for every bucket before the update).
func ride(t *testing.T, f Factory, n int, so strategy.OptimizerOptions) {
	ctx := testCtx(t)
	P := 0
	B := n * PerDev
	ds, err := Regression(Steps*2*B, in, out, 5)
	if err != nil {
		t.Fatal(err)
	}
	train := func(withRide bool) ([]strategy.Strategy, [][]bool) {
		strats := f(t, n)
		P = len(strats)
		mustSetup(t, ctx, strats, &MLP{In: in, Hidden: hidden, Out: out, Optimizer: "adam", LR: 0.02}, ds)
		rodes := make([][]bool, P)
		err := Each(strats, func(r int, s strategy.Strategy) error {
			var hooked, sampledAfterHook bool
			samples := 0
			rd := &strategy.Ride{Values: make([]float64, 3)}
			rd.Sample = func(v []float64) {
				samples++
				sampledAfterHook = hooked
				v[0], v[1], v[2] = float64(r+1), 1, 0.5
			}
			for k := range Steps {
				sampledAfterHook, samples, rd.Rode = false, 0, false
				for i := range 2 {
					b, err := Rows(ds, (2*k+i)*B, (2*k+i+1)*B)
					if err != nil {
						return err
					}
					o := strategy.TrainOptions{Sync: i == 1, Accumulate: i > 0, Scale: 0.5, BeforeBackward: func(float64) error { hooked = true; return nil }}
					if withRide && o.Sync {
						o.Ride = rd
					}
					hooked = false // this micro-batch's BeforeBackward sets it
					if _, err := s.Step(ctx, module.Train, Shard(b, r, P), o); err != nil {
						return err
					}
				}
				if _, err := s.OptimizerStep(ctx, so); err != nil {
					return err
				}
				rodes[r] = append(rodes[r], rd.Rode)
				if !rd.Rode {
					continue
				}
				if want := []float64{float64(P * (P + 1) / 2), float64(P), 0.5 * float64(P)}; !slices.Equal(rd.Values, want) {
					return fmt.Errorf("step %d: the ride brought %v, want the sums %v", k, rd.Values, want)
				}
				if samples != 1 || !sampledAfterHook {
					return fmt.Errorf("step %d: Sample ran %d times (after BeforeBackward: %v), want once, after it", k, samples, sampledAfterHook)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return strats, rodes
	}
	got, rodes := train(true)
	want, _ := train(false)
	for r := range rodes {
		if len(slices.Compact(slices.Clone(rodes[r]))) != 1 || !slices.Equal(rodes[r], rodes[0]) {
			t.Errorf("Rode by process and step: %v: a strategy carries the values at every step on every process, or never", rodes)
			break
		}
	}
	t.Logf("the strategy carries the values: %v", rodes[0][0])
	if g, w := Hashes(got), Hashes(want); !slices.Equal(g, w) {
		t.Errorf("weights after %d steps with a ride %v, without %v", Steps, g, w)
	}
}
