package callbacks_test

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// TestModelSummaryUnderFSDP: under fsdp, where no rank holds the whole
// model, the summary rank 0 prints is the one device prints: the layers'
// input and output sizes and the parameter counts and size, not a table
// without them.
func TestModelSummaryUnderFSDP(t *testing.T) {
	for name, m := range map[string]func() module.Module{
		"params of its own":  func() module.Module { return &linreg{} },
		"an nn.Linear layer": func() module.Module { return &nnReg{} },
	} {
		t.Run(name, func(t *testing.T) { summaryUnderFSDP(t, m) })
	}
}

// nnReg is linreg's model as an nn.Linear, whose input and output sizes
// the summary shows.
type nnReg struct{ fc *nn.Linear }

func (m *nnReg) Configure(b *module.Builder) error {
	m.fc = nn.NewLinear(b, "fc", 4, 1)
	return nil
}

func (m *nnReg) TrainingStep(s *module.Step) (*G.Node, error) {
	pred := G.Must(G.Reshape(m.fc.Forward(s, s.Input("x")), []int{s.BatchSize()}))
	return nn.MSELoss(pred, s.Input("y")), nil
}

func summaryUnderFSDP(t *testing.T, newModule func() module.Module) {
	var one bytes.Buffer
	ms, err := callbacks.NewModelSummary(&one, 0)
	must(t, err)
	tr, err := trainer.New(trainer.Config{MaxSteps: 1, Seed: 5, Callbacks: []trainer.Callback{ms},
		Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: t.TempDir()})
	must(t, err)
	train, _ := regression(t)
	must(t, tr.Fit(context.Background(), newModule(), train, nil))
	const ranks = 2
	group, err := inproc.NewGroup(ranks, inproc.Timeout(20*time.Second))
	must(t, err)
	outs := make([]bytes.Buffer, ranks)
	trs := make([]*trainer.Trainer, ranks)
	root := t.TempDir()
	for r := range ranks {
		s, err := fsdp.New(fsdp.Config{Group: group[r]})
		must(t, err)
		ms, err := callbacks.NewModelSummary(&outs[r], 0)
		must(t, err)
		trs[r], err = trainer.New(trainer.Config{MaxSteps: 1, Seed: 5, StrategyImpl: s, Callbacks: []trainer.Callback{ms},
			Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: root, HandleSignals: trainer.Bool(false)})
		must(t, err)
	}
	fitRanks(t, trs, newModule)
	if got, want := outs[0].String(), one.String(); got != want {
		t.Errorf("fsdp rank 0's summary:\n%s\nwant one device's:\n%s", got, want)
	}
	if outs[1].Len() != 0 {
		t.Errorf("rank 1 printed a summary:\n%s", outs[1].String())
	}
}

// fitRanks runs one Fit on the regression data per in-process rank, at
// once, and tears each trainer down; any rank's error fails the test.
func fitRanks(t *testing.T, trs []*trainer.Trainer, newModule func() module.Module) {
	t.Helper()
	errs := make([]error, len(trs))
	var wg sync.WaitGroup
	for r, tr := range trs {
		train, _ := regression(t)
		wg.Go(func() {
			errs[r] = tr.Fit(context.Background(), newModule(), train, nil)
			if err := tr.Teardown(context.Background()); errs[r] == nil {
				errs[r] = err
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}
