package main

import (
	"context"
	"fmt"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
)

// threadSettings are the explicit settings the threads workload compares
// the default plan with: goroutine workers x BLAS threads per multiply.
var threadSettings = [][2]int{{1, 1}, {2, 1}, {1, 2}}

// threadsBLAS lists the matrix multiplies installed here: gonum always,
// BLIS and OpenBLAS when the dynamic loader finds them (and they pass their
// load checks).
func threadsBLAS(o *Options) []string {
	want := o.BLAS
	if len(want) == 1 && want[0] == "auto" {
		want = []string{"gonum", "blis", "openblas"}
	}
	var out []string
	for _, b := range want {
		switch b {
		case "blis":
			if _, err := blas.LoadBLIS(); err != nil {
				continue
			}
		case "openblas":
			if _, err := blas.LoadOpenBLAS(); err != nil {
				continue
			}
		}
		out = append(out, b)
	}
	return out
}

func init() {
	register(&workload{
		Name: "threads",
		Doc: "the default thread plan against explicit workers x BLAS threads (1x1, 2x1, 1x2), for each BLAS installed, " +
			"training -model (resnet8 or mlp) for -steps batches (default 150); ratio = default / best explicit, want >= 0.95",
		Configs: func(o *Options) ([]Config, error) {
			if o.Model != "resnet8" && o.Model != "mlp" {
				return nil, fmt.Errorf("-model is %q: use resnet8 or mlp", o.Model)
			}
			base := Config{Workload: "threads", Impl: "fulgur", Model: o.Model, Batch: orDefault(o.Batch, 64),
				Epochs: 1, Steps: orDefault(o.Steps, 150), Seed: o.Seed, Data: o.Data}
			var cs []Config
			for _, b := range threadsBLAS(o) {
				c := base
				c.BLAS, c.Variant = b, "default"
				cs = append(cs, c)
				for _, s := range threadSettings {
					c := base
					c.BLAS, c.Workers, c.Threads = b, s[0], s[1]
					c.Variant = fmt.Sprintf("%dx%d", s[0], s[1])
					cs = append(cs, c)
				}
			}
			return cs, nil
		},
		Run: func(ctx context.Context, c Config) (Figures, error) {
			var m module.Module
			switch c.Model {
			case "resnet8":
				m = &models.ResNet{}
			case "mlp":
				m = &models.MLP{}
			default:
				return nil, fmt.Errorf("threads: model %q: use resnet8 or mlp", c.Model)
			}
			return trainJob{Config: c, Module: m, Strategy: "single", NoTest: true}.run(ctx)
		},
		Derive: threadRatios,
	})
}

// threadRatios adds, for each BLAS, the default plan's samples/s over the
// best explicit setting's, run by run (runs are interleaved, so run i of
// every configuration saw about the same load).
func threadRatios(o *Options, rs []*Result) []Row {
	var rows []Row
	seen := map[string]bool{}
	for _, r := range rs {
		b := r.Config.BLAS
		if seen[b] {
			continue
		}
		seen[b] = true
		var ratios []float64
		for run := 0; run < o.Runs; run++ {
			def, best := 0.0, 0.0
			for _, q := range rs {
				if q.Config.BLAS != b || run >= len(q.Runs) {
					continue
				}
				v := q.Runs[run]["samples_per_s"]
				if q.Config.Variant == "default" {
					def = v
				} else {
					best = max(best, v)
				}
			}
			if def > 0 && best > 0 {
				ratios = append(ratios, def/best)
			}
		}
		if len(ratios) == 0 {
			continue
		}
		s := stat(ratios)
		verdict := "ok"
		if s.Median < 0.95 {
			verdict = "below 0.95"
		}
		rows = append(rows, Row{Workload: "threads", Config: fmt.Sprintf("%s default/best explicit samples_per_s: %s", b, verdict),
			N: len(ratios), Labels: map[string]any{"blas": b, "figure": "samples_per_s"}, Figures: map[string]Stat{"ratio": s}})
	}
	return rows
}
