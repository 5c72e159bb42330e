package optim

import (
	"math"
	"strings"
	"testing"
)

// Learning rates produced by PyTorch 1.13 (torch.optim.lr_scheduler) with an
// SGD optimizer at lr 0.1: element 0 is the rate after construction, element
// k the rate after k calls of scheduler.step(). Produced once with
// /usr/bin/python3; the test does not need Python.
var (
	// StepLR(step_size=3, gamma=0.5)
	torchStepLR = []float64{0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125}
	// CosineAnnealingLR(T_max=10, eta_min=0.001)
	torchCosine = []float64{0.1, 0.09757729755661011, 0.0905463412215599, 0.07959536998847742, 0.0657963412215599, 0.0505, 0.03520365877844011, 0.02140463001152259, 0.010453658778440109, 0.0034227024433899004, 0.001, 0.0034227024433899004, 0.01045365877844014}
	// SequentialLR([LinearLR(start_factor=1/4, total_iters=3), CosineAnnealingLR(T_max=6)], milestones=[4])
	torchWarmCos = []float64{0.025, 0.05, 0.07500000000000001, 0.1, 0.1, 0.09330127018922195, 0.07500000000000001, 0.05, 0.025000000000000012, 0.006698729810778065, 0.0, 0.006698729810778065, 0.025}
	// ReduceLROnPlateau(mode='min', factor=0.5, patience=2, threshold=0.01, cooldown=1, min_lr=0.01), metrics plateauMin
	plateauMin      = []float64{1.0, 0.9, 0.95, 0.92, 0.91, 0.905, 0.8, 0.85, 0.86, 0.87, 0.88, 0.89, 0.9, 0.91, 0.92}
	torchPlateauMin = []float64{0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.025, 0.0125, 0.0125}
	// ReduceLROnPlateau(mode='max', factor=0.1, patience=1, threshold=0.02, threshold_mode='abs'), metrics plateauMax
	plateauMax      = []float64{0.5, 0.6, 0.6, 0.6, 0.65, 0.7, 0.7, 0.7, 0.7, 0.7}
	torchPlateauMax = []float64{0.1, 0.1, 0.1, 0.1, 0.010000000000000002, 0.010000000000000002, 0.010000000000000002, 0.010000000000000002, 0.0010000000000000002, 0.0010000000000000002, 0.00010000000000000003}
)

// mustSched unwraps a constructor's result; the constructors' errors are
// tested in TestSchedulerErrors, so one here is a broken test: panic.
func mustSched[S Scheduler](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}

// runSched starts s on a fresh SGD at lr 0.1 and records the rate after
// Start and after each Step.
func runSched(t *testing.T, s Scheduler, steps int, metrics []float64) []float64 {
	t.Helper()
	o, err := NewSGD(SGDConfig{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	s.(Starter).Start(o)
	got := []float64{o.LR()}
	for i := range steps {
		m := math.NaN()
		if metrics != nil {
			m = metrics[i]
		}
		s.Step(o, m)
		got = append(got, o.LR())
	}
	return got
}

func TestSchedulersAgainstTorch(t *testing.T) {
	cases := []struct {
		name    string
		new     func() Scheduler
		metrics []float64
		want    []float64
	}{
		{"StepLR", func() Scheduler { return mustSched(NewStepLR(0.1, 3, 0.5)) }, nil, torchStepLR},
		{"CosineAnnealing", func() Scheduler { return mustSched(NewCosineAnnealing(0.1, 10, 0.001)) }, nil, torchCosine},
		{"LinearWarmup+Cosine", func() Scheduler {
			return mustSched(NewLinearWarmup(0.1, 4, mustSched(NewCosineAnnealing(0.1, 6, 0))))
		}, nil, torchWarmCos},
		{"ReduceOnPlateau min", func() Scheduler {
			return mustSched(NewReduceOnPlateau(PlateauConfig{Mode: "min", Factor: 0.5, Patience: 2, Threshold: 0.01, Cooldown: 1, MinLR: 0.01}))
		}, plateauMin, torchPlateauMin},
		{"ReduceOnPlateau max abs", func() Scheduler {
			return mustSched(NewReduceOnPlateau(PlateauConfig{Mode: "max", Factor: 0.1, Patience: 1, Threshold: 0.02, ThresholdMode: "abs"}))
		}, plateauMax, torchPlateauMax},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := runSched(t, tc.new(), len(tc.want)-1, tc.metrics)
			for i := range tc.want {
				if d := math.Abs(got[i] - tc.want[i]); d > 1e-15 {
					t.Errorf("lr after %d steps = %.17g, torch %.17g", i, got[i], tc.want[i])
				}
			}
			// Resume half-way from State: the rest matches.
			h := len(tc.want) / 2
			s := tc.new()
			o, _ := NewSGD(SGDConfig{LR: 0.1})
			s.(Starter).Start(o)
			for i := range h {
				m := math.NaN()
				if tc.metrics != nil {
					m = tc.metrics[i]
				}
				s.Step(o, m)
			}
			r := tc.new()
			if err := r.LoadState(s.State()); err != nil {
				t.Fatal(err)
			}
			o2, _ := NewSGD(SGDConfig{LR: o.LR()}) // the optimizer's own state restores lr
			r.(Starter).Start(o2)
			for i := h; i < len(tc.want)-1; i++ {
				m := math.NaN()
				if tc.metrics != nil {
					m = tc.metrics[i]
				}
				r.Step(o2, m)
				if d := math.Abs(o2.LR() - tc.want[i+1]); d > 1e-15 {
					t.Errorf("resumed: lr after %d steps = %.17g, torch %.17g", i+1, o2.LR(), tc.want[i+1])
				}
			}
		})
	}
}

func TestWarmupWithoutAfterHolds(t *testing.T) {
	got := runSched(t, mustSched(NewLinearWarmup(0.2, 4, nil)), 6, nil)
	want := []float64{0.05, 0.1, 0.15000000000000002, 0.2, 0.2, 0.2, 0.2}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-16 {
			t.Errorf("lr[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestSchedulerErrors(t *testing.T) {
	plateau, _ := NewReduceOnPlateau(PlateauConfig{})
	cos, _ := NewCosineAnnealing(0.1, 10, 0, Every(PerEpoch))
	cases := []struct {
		name string
		err  error
		want []string
	}{
		{"steplr", second(NewStepLR(0, 0, -1)), []string{"StepLR baseLR is 0", "StepLR stepSize is 0", "StepLR gamma is -1"}},
		{"cosine", second(NewCosineAnnealing(0.1, 0, 0.5)), []string{"CosineAnnealing tMax is 0", "CosineAnnealing etaMin is 0.5: use a final learning rate in [0, baseLR]"}},
		{"warmup", second(NewLinearWarmup(0.1, 0, nil)), []string{"LinearWarmup warmupSteps is 0: use 1 or more"}},
		{"warmup interval", second(NewLinearWarmup(0.1, 5, cos, Every(PerStep))), []string{"LinearWarmup runs per step but the scheduler after it runs per epoch"}},
		{"warmup plateau", second(NewLinearWarmup(0.1, 5, plateau)), []string{"cannot hand over to ReduceOnPlateau"}},
		{"bad interval", second(NewStepLR(0.1, 1, 0.5, Every(7))), []string{"StepLR: interval is Interval(7)"}},
		{"plateau", second(NewReduceOnPlateau(PlateauConfig{Mode: "lowest", Factor: 1, Patience: -1, ThresholdMode: "pct", Cooldown: -2, MinLR: -1})),
			[]string{`PlateauConfig.Mode is "lowest"`, "PlateauConfig.Factor is 1: use a value in (0, 1)", "PlateauConfig.Patience is -1", `PlateauConfig.ThresholdMode is "pct"`, "PlateauConfig.Cooldown is -2", "PlateauConfig.MinLR is -1"}},
		{"load missing", mustSched(NewStepLR(0.1, 1, 0.5)).LoadState(map[string]float64{}), []string{`StepLR.LoadState: missing key "count"`}},
		{"load fractional", mustSched(NewCosineAnnealing(0.1, 1, 0)).LoadState(map[string]float64{"count": 1.5}), []string{`key "count" is 1.5`}},
		{"load plateau", plateau.LoadState(map[string]float64{"best": 1}), []string{`missing key "num_bad"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(tc.err.Error(), w) {
					t.Errorf("error %q lacks %q", tc.err, w)
				}
			}
		})
	}
	if cos.Interval() != PerEpoch || plateau.Interval() != PerEpoch || plateau.Config().Factor != 0.1 {
		t.Errorf("intervals/defaults: cos %v plateau %v factor %v", cos.Interval(), plateau.Interval(), plateau.Config().Factor)
	}
	if w := mustSched(NewLinearWarmup(0.1, 2, cos)); w.Interval() != PerEpoch {
		t.Errorf("warm-up before a per-epoch schedule runs per %v", w.Interval())
	}
}

func TestSchedulerStepDoesNotAllocate(t *testing.T) {
	o, _ := NewAdam(AdamConfig{})
	w := mustSched(NewLinearWarmup(1e-3, 10, mustSched(NewCosineAnnealing(1e-3, 100, 0))))
	p := mustSched(NewReduceOnPlateau(PlateauConfig{}))
	if a := testing.AllocsPerRun(50, func() { w.Step(o, math.NaN()); p.Step(o, 1) }); a != 0 {
		t.Errorf("Step allocates %v times", a)
	}
}

func second[T any](_ T, err error) error { return err }

// torch's is_better for every mode and threshold mode, with best = 10 and
// threshold 0.1.
func TestPlateauIsBetter(t *testing.T) {
	cases := []struct {
		mode, tmode string
		better      []float64
		notBetter   []float64
	}{
		{"min", "rel", []float64{8.99}, []float64{9, 9.5, 11, math.NaN()}},      // a < best*(1-0.1)
		{"min", "abs", []float64{9.89}, []float64{9.9, 9.95, 11, math.NaN()}},   // a < best-0.1
		{"max", "rel", []float64{11.01}, []float64{11, 10.5, 9, math.NaN()}},    // a > best*(1+0.1)
		{"max", "abs", []float64{10.11}, []float64{10.1, 10.05, 9, math.NaN()}}, // a > best+0.1
	}
	for _, tc := range cases {
		s := mustSched(NewReduceOnPlateau(PlateauConfig{Mode: tc.mode, ThresholdMode: tc.tmode, Threshold: 0.1}))
		s.best = 10
		for _, a := range tc.better {
			if !s.better(a) {
				t.Errorf("%s/%s: %v should beat 10", tc.mode, tc.tmode, a)
			}
		}
		for _, a := range tc.notBetter {
			if s.better(a) {
				t.Errorf("%s/%s: %v should not beat 10", tc.mode, tc.tmode, a)
			}
		}
	}
	d := DefaultPlateauConfig()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if want := (PlateauConfig{Mode: "min", Factor: 0.1, Patience: 10, Threshold: 1e-4, ThresholdMode: "rel", Eps: 1e-8, Interval: PerEpoch}); d != want {
		t.Errorf("DefaultPlateauConfig = %+v, want torch's %+v", d, want)
	}
}
