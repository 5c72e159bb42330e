package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
)

// scaling: each model under ddp with 2 ranks (per-rank batch 32) against 1
// rank (batch 64), 200 steps; efficiency = samples/s(2 ranks) / (2 ×
// samples/s(1 rank)). Every rank, the baseline's included, runs on exactly
// one core (Config.Pinned: GOMAXPROCS=1, one BLAS thread, one nn/ops
// worker, an affinity mask of its own core; the peer with
// torch.set_num_threads(1) and the same mask): the baseline cannot borrow
// the second core through image workers, and two ranks do not start two
// workers each on two cores.
//
// fulgur also runs 1 rank at the ranks' batch (32), which splits the
// efficiency into its two factors: half_batch_speed, samples/s at batch
// 32 over batch 64 on one rank (what the smaller batch alone costs or
// gains), and ddp_efficiency, the 2 ranks over twice that (what running
// as two ranks costs: the all-reduce, which carries the stop agreement,
// and the waits for the slower rank).
//
// And it runs 2 independent one-rank trainings at batch 32 at once, each
// pinned to its own core like a rank (Config.Coexist): coexist_efficiency,
// their samples/s over twice one alone, is the most ddp_efficiency can be
// on this machine, since two processes computing side by side slow each
// other down (shared caches and memory bandwidth, the host's other work)
// without any collective; ddp_of_coexist, the 2 ranks over the 2
// independent trainings, is what ddp itself costs within that limit.
// ddp_of_coexist_median_step is the same from median step times (see
// medianStepOfCoexist): a burst of other work on one core stalls both
// ranks but one of the trainings, which the samples/s figure charges to
// ddp and the medians leave out.
func init() {
	register(&workload{
		Name: "scaling",
		Doc:  "ddp with 2 ranks (batch 32 each) vs 1 rank (batch 64), and (fulgur) 1 rank at batch 32 alone and as 2 independent trainings at once (the machine's ceiling), each rank pinned to one core, 200 steps, mlp and resnet8 (-backend tcp,shm: each backend)",
		Configs: func(o *Options) ([]Config, error) {
			if !strategy.Known("ddp") {
				return nil, errors.New(`strategy "ddp" is not registered yet (strategy/registry): the workload runs once it lands`)
			}
			models := []string{"mlp"}
			if newResNet8 != nil {
				models = append([]string{"resnet8"}, models...)
			}
			steps := orDefault(o.Steps, 200)
			backends := o.Backends
			if len(backends) == 0 {
				backends = []string{""} // auto
			}
			var cs []Config
			for _, m := range models {
				for _, ranks := range []int{1, 2} {
					c := Config{Workload: "scaling", Variant: m, Impl: "fulgur", Threads: 1, BLAS: o.BLAS[0],
						Workers: 1, Pinned: true, Batch: scalingBatch / ranks, Epochs: 1, Steps: steps, Ranks: ranks, Seed: o.Seed, Data: o.Data}
					if ranks == 1 {
						cs = append(cs, c)
						half := c
						half.Batch = scalingBatch / 2
						cs = append(cs, half)
						both := half
						both.Ranks, both.Coexist = 2, true
						cs = append(cs, both)
					} else {
						for _, b := range backends {
							c.Backend = b
							cs = append(cs, c)
						}
						c.Backend = ""
					}
					if o.Peer == "torch" {
						c.Impl, c.BLAS = "torch", ""
						cs = append(cs, c)
					}
				}
			}
			return cs, nil
		},
		Run: func(ctx context.Context, c Config) (Figures, error) {
			var mod module.Module
			switch c.Variant {
			case "mlp":
				mod = &models.MLP{}
			case "resnet8":
				if newResNet8 == nil {
					return nil, errors.New("models has no ResNet8 module yet")
				}
				mod = newResNet8()
			default:
				return nil, fmt.Errorf("scaling: unknown model %q", c.Variant)
			}
			st := "single"
			switch {
			case c.Coexist:
				c.Ranks = 1 // one of the independent trainings
			case c.Ranks > 1:
				st = "ddp"
			}
			return trainJob{Config: c, Module: mod, Strategy: st}.run(ctx)
		},
		Derive: func(o *Options, rs []*Result) []Row {
			var rows []Row
			// Each backend's 2 ranks against the one-rank baseline.
			type key struct{ impl, model, backend string }
			one, half, two, both := map[key]*Result{}, map[key]*Result{}, map[key]*Result{}, map[key]*Result{}
			var keys []key
			for _, r := range rs {
				k := key{r.Config.Impl, r.Config.Variant, r.Config.Backend}
				switch {
				case r.Config.Coexist:
					both[k] = r
				case r.Config.Ranks > 1:
					two[k] = r
					keys = append(keys, k)
				case r.Config.Batch == scalingBatch/2:
					half[k] = r
				default:
					one[k] = r
				}
			}
			for _, k := range keys {
				a, b := one[key{k.impl, k.model, ""}], two[k]
				if a == nil {
					continue
				}
				var eff, effMedian, halfSpeed, ddpEff, coexistEff, ddpOfCoexist, ddpOfCoexistMedian, othersOne, othersTwo []float64
				h, co := half[key{k.impl, k.model, ""}], both[key{k.impl, k.model, ""}]
				for run := 0; run < min(len(a.Runs), len(b.Runs)); run++ {
					s1, s2 := a.Runs[run]["samples_per_s"], b.Runs[run]["samples_per_s"]
					if s1 > 0 {
						eff = append(eff, s2/(2*s1))
					}
					if e, ok := medianStepEfficiency(a.Config, a.Runs[run], b.Config, b.Runs[run]); ok {
						effMedian = append(effMedian, e)
					}
					if o1, ok := a.Runs[run]["core_others_pct"]; ok {
						othersOne = append(othersOne, o1)
						othersTwo = append(othersTwo, maxCoreOthers(b.Runs[run]))
					}
					if co != nil && run < len(co.Runs) {
						if r, ok := medianStepOfCoexist(b.Config, b.Runs[run], co.Config, co.Runs[run]); ok {
							ddpOfCoexistMedian = append(ddpOfCoexistMedian, r)
						}
					}
					if h != nil && run < len(h.Runs) && s1 > 0 {
						if sh := h.Runs[run]["samples_per_s"]; sh > 0 {
							halfSpeed = append(halfSpeed, sh/s1)
							ddpEff = append(ddpEff, s2/(2*sh))
							if co != nil && run < len(co.Runs) && co.Runs[run]["samples_per_s"] > 0 {
								sc := co.Runs[run]["samples_per_s"]
								coexistEff = append(coexistEff, sc/(2*sh))
								ddpOfCoexist = append(ddpOfCoexist, s2/sc)
							}
						}
					}
				}
				if len(eff) > 0 {
					name := k.impl + " " + k.model
					labels := map[string]any{"impl": k.impl, "model": k.model, "ranks": 2}
					if k.backend != "" {
						name += " " + k.backend
						labels["backend"] = k.backend
					}
					figs := map[string]Stat{"efficiency": stat(eff)}
					if len(effMedian) > 0 {
						figs["efficiency_median_step"] = stat(effMedian)
					}
					if len(halfSpeed) > 0 {
						figs["half_batch_speed"] = stat(halfSpeed)
						figs["ddp_efficiency"] = stat(ddpEff)
					}
					if len(othersOne) > 0 {
						// Other work on the machine takes the ranks' cores
						// more than the baseline's: it runs on the core
						// one rank leaves free. The efficiency then
						// measures the sharing.
						figs["core_others_pct_one"] = stat(othersOne)
						figs["core_others_pct_ranks"] = stat(othersTwo)
					}
					if len(coexistEff) > 0 {
						figs["coexist_efficiency"] = stat(coexistEff)
						figs["ddp_of_coexist"] = stat(ddpOfCoexist)
					}
					if len(ddpOfCoexistMedian) > 0 {
						figs["ddp_of_coexist_median_step"] = stat(ddpOfCoexistMedian)
					}
					rows = append(rows, Row{Workload: "scaling", Config: name + " efficiency", N: len(eff),
						Labels: labels, Figures: figs})
				}
			}
			return rows
		},
	})
}

// maxCoreOthers is the largest core_others_pct of a run's ranks.
func maxCoreOthers(f Figures) float64 {
	m := f["core_others_pct"]
	for k, v := range f {
		if strings.HasSuffix(k, " core_others_pct") {
			m = max(m, v)
		}
	}
	return m
}

// scalingBatch is the one rank's batch; each of 2 ranks takes half.
const scalingBatch = 64

// medianStepEfficiency is the efficiency of one run from each side's
// median step time rather than its mean (samples/s): a step of the
// ranks' (their global batch, in the median step time of rank 0) against
// twice one rank's. On a machine shared with other work, a burst of it
// stalls one rank and, a step being a collective, every rank, which moves
// the mean of a short run by as much as the difference measured; the
// median is what a step takes when nothing else runs. The peer reports
// no step times: ok is false.
func medianStepEfficiency(c1 Config, f1 Figures, c2 Config, f2 Figures) (float64, bool) {
	t1, t2 := f1["step_ms_median"], f2["step_ms_median"]
	if t1 <= 0 || t2 <= 0 {
		return 0, false
	}
	one := float64(c1.Batch*max(c1.Ranks, 1)) / t1
	two := float64(c2.Batch*max(c2.Ranks, 1)) / t2
	return two / (2 * one), true
}

// medianStepOfCoexist is ddp_of_coexist from median step times: the
// ranks' global batch over rank 0's median step, against the sum of each
// coexisting training's batch over its own median step. A burst of other
// work on one core for part of a run stalls both ranks (each step waits
// for the slower) but only one of the independent trainings, so it lowers
// ddp_of_coexist, from samples/s, by more than what ddp itself costs; the
// medians are what a step takes when no burst hits it, which leaves ddp's
// own cost: the all-reduce, and the waits for the other rank's ordinary
// step-to-step variation. ok is false when a median is missing (the peer;
// a training that reported none).
func medianStepOfCoexist(cd Config, fd Figures, cc Config, fc Figures) (float64, bool) {
	t := fd["step_ms_median"]
	if t <= 0 {
		return 0, false
	}
	ranks := float64(cd.Batch*max(cd.Ranks, 1)) / t
	var both float64
	for p := 0; p < max(cc.Ranks, 1); p++ {
		k := "step_ms_median"
		if p > 0 {
			k = fmt.Sprintf("process%d step_ms_median", p)
		}
		tp := fc[k]
		if tp <= 0 {
			return 0, false
		}
		both += float64(cc.Batch) / tp
	}
	return ranks / both, true
}
