package trainer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// panicSites records, per panic value, the file:line of the user's code
// that panicked (the call of boom).
var (
	panicMu    sync.Mutex
	panicSites = map[string]string{}
)

// boom panics with what, after recording the line that called it.
func boom(what string) {
	_, file, line, _ := runtime.Caller(1)
	panicMu.Lock()
	panicSites[what] = fmt.Sprintf("%s:%d", filepath.Base(file), line)
	panicMu.Unlock()
	panic(what)
}

func site(what string) string {
	panicMu.Lock()
	defer panicMu.Unlock()
	return panicSites[what]
}

// panicStep panics in TrainingStep, a module hook, or not at all.
type panicStep struct {
	linreg
	inStep, inHook bool
}

func (m *panicStep) TrainingStep(s *module.Step) (*G.Node, error) {
	if m.inStep {
		boom("step exploded")
	}
	return m.linreg.TrainingStep(s)
}

func (m *panicStep) OnTrainBatchStart(ctx context.Context, b *data.Batch, i int) error {
	if m.inHook && i == 2 {
		boom("hook exploded")
	}
	return nil
}

type panicCallback struct{}

func (panicCallback) Name() string { return "panicCallback" }
func (panicCallback) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.GlobalStep == 3 {
		boom("callback exploded")
	}
	return nil
}

// panicLogger panics in LogMetrics or in Finalize.
type panicLogger struct{ inFinalize bool }

func (panicLogger) Name() string                        { return "panicLogger" }
func (panicLogger) LogHyperparams(map[string]any) error { return nil }
func (l panicLogger) LogMetrics(step int, m map[string]float64) error {
	if !l.inFinalize && step == 2 {
		boom("logger exploded")
	}
	return nil
}
func (l panicLogger) Finalize(string) error {
	if l.inFinalize {
		boom("finalize exploded")
	}
	return nil
}

// panicData panics reading one example.
type panicData struct{ data.Dataset }

func (d panicData) Read(i int, dst [][]float32) error {
	if i == 5 {
		boom("read exploded")
	}
	return d.Dataset.Read(i, dst)
}

// checkPanicError checks that err carries the panic value and the file:line
// of the user's code that panicked.
func checkPanicError(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	msg := err.Error()
	if !strings.Contains(msg, what) {
		t.Errorf("the error does not carry the panic value %q:\n%s", what, msg)
	}
	if s := site(what); s == "" || !strings.Contains(msg, s) {
		t.Errorf("the error does not name the user's line %s:\n%s", s, msg)
	}
}

func TestPanicInUserCodeKeepsItsStack(t *testing.T) {
	ds := regression(t, 64, 0.01, 4)
	cases := []struct {
		what string
		mod  module.Module
		cbs  []trainer.Callback
		ds   data.Dataset
		lgs  []trainer.Logger
	}{
		{"step exploded", &panicStep{linreg: linreg{in: 4, lr: 0.01}, inStep: true}, nil, ds, nil},
		{"hook exploded", &panicStep{linreg: linreg{in: 4, lr: 0.01}, inHook: true}, nil, ds, nil},
		{"callback exploded", &linreg{in: 4, lr: 0.01}, []trainer.Callback{panicCallback{}}, ds, nil},
		{"read exploded", &linreg{in: 4, lr: 0.01}, nil, panicData{ds}, nil},
		{"logger exploded", &linreg{in: 4, lr: 0.01}, nil, ds, []trainer.Logger{panicLogger{}}},
		{"finalize exploded", &linreg{in: 4, lr: 0.01}, nil, ds, []trainer.Logger{panicLogger{inFinalize: true}}},
	}
	for _, c := range cases {
		t.Run(strings.Fields(c.what)[0], func(t *testing.T) {
			tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, LogEveryNSteps: 1, Callbacks: c.cbs, Loggers: c.lgs, DefaultRootDir: t.TempDir()}))
			if err != nil {
				t.Fatal(err)
			}
			err = tr.Fit(context.Background(), c.mod, loader(t, c.ds, 8, false, false), nil)
			checkPanicError(t, err, c.what)
		})
	}
}

// rankPanic panics in TrainingStep on one rank only.
type rankPanic struct {
	linreg
	rank int
}

func (m *rankPanic) TrainingStep(s *module.Step) (*G.Node, error) {
	if m.rank == 1 {
		boom("rank 1 step exploded")
	}
	return m.linreg.TrainingStep(s)
}

func TestPanicOnOneDDPRankIsReportedOnEveryRank(t *testing.T) {
	group, err := inproc.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	ds := regression(t, 64, 0.01, 4)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, StrategyImpl: d, DefaultRootDir: t.TempDir(), HandleSignals: trainer.Bool(false)}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = tr.Fit(context.Background(), &rankPanic{linreg: linreg{in: 4, lr: 0.01}, rank: r}, loader(t, ds, 8, false, false), nil)
		}()
	}
	wg.Wait()
	checkPanicError(t, errs[1], "rank 1 step exploded")
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1") {
		t.Errorf("rank 0's error does not name rank 1: %v", errs[0])
	}
}

// stallAt blocks rank 1 after an optimizer step until released: a rank that
// stops answering.
type stallAt struct {
	step    int
	release chan struct{}
}

func (s stallAt) Name() string { return "stallAt" }
func (s stallAt) OnTrainBatchEnd(ctx context.Context, st *trainer.State) error {
	if st.Rank == 1 && st.GlobalStep == s.step {
		<-s.release
	}
	return nil
}

func TestDDPTimeoutNamesTheSilentRankAndItsLastOperation(t *testing.T) {
	group, err := inproc.NewGroup(2, inproc.Timeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ds := regression(t, 64, 0.01, 4)
	release := make(chan struct{})
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, StrategyImpl: d, DefaultRootDir: t.TempDir(), HandleSignals: trainer.Bool(false),
			Callbacks: []trainer.Callback{stallAt{step: 3, release: release}}}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 8, false, false), nil)
			if r == 0 {
				close(release) // rank 0 gave up: let rank 1 go on and fail
			}
		}()
	}
	wg.Wait()
	if errs[0] == nil {
		t.Fatal("rank 0 finished although rank 1 stopped answering")
	}
	msg := errs[0].Error()
	for _, s := range []string{"rank 1", "the last collective rank 1 finished was the all-reduce of gradient bucket 1 of 1 of step 3", "after step 3"} {
		if !strings.Contains(msg, s) {
			t.Errorf("rank 0's error lacks %q:\n%s", s, msg)
		}
	}
	if errs[1] == nil {
		t.Error("rank 1 carried on after rank 0 gave up")
	}
}
