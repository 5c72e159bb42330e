package trainer_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/trainer"
)

// slowFitEnds spends time in OnFitStart and OnFitEnd, as the Plots callback
// does drawing its charts, and reports the profiler's table from OnFitEnd,
// as Plots does into report.md.
type slowFitEnds struct {
	p     *profiler.Simple
	table bytes.Buffer
}

func (*slowFitEnds) Name() string { return "slowFitEnds" }
func (c *slowFitEnds) OnFitStart(context.Context, *trainer.State) error {
	time.Sleep(30 * time.Millisecond)
	return nil
}
func (c *slowFitEnds) OnFitEnd(context.Context, *trainer.State) error {
	time.Sleep(60 * time.Millisecond)
	return c.p.Report(&c.table)
}

// The Simple profiler's "fit" span holds the fit's own hooks: before, the
// span ended with the training loop, so a slow OnFitEnd (the Plots
// callback's charts) showed as more than 100% of the fit, and OnFitStart's
// time fell outside it. A report made inside the fit (report.md at
// OnFitEnd) gives shares of the fit so far.
func TestProfilerFitSpanHoldsTheFitHooks(t *testing.T) {
	p := profiler.NewSimple()
	cb := &slowFitEnds{p: p}
	var out bytes.Buffer
	cfg := quiet(trainer.Config{MaxEpochs: 1, Seed: 1, Profiler: p, Callbacks: []trainer.Callback{cb}})
	cfg.Out = &out
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ds := regression(t, 64, 0.01, 1)
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	rows := map[string]profiler.Row{}
	for _, r := range p.Rows() {
		rows[r.Action] = r
		if r.Share > 1 {
			t.Errorf("%s: %.1f%% of fit", r.Action, 100*r.Share)
		}
	}
	fit, start, end := rows["fit"], rows["callbacks/slowFitEnds.OnFitStart"], rows["callbacks/slowFitEnds.OnFitEnd"]
	if fit.Calls != 1 || start.Calls != 1 || end.Calls != 1 {
		t.Fatalf("rows %v", rows)
	}
	if fit.Total < start.Total+end.Total+rows["forward+backward"].Total {
		t.Errorf("fit span %v is shorter than its hooks (%v, %v) and steps", fit.Total, start.Total, end.Total)
	}
	if !strings.Contains(strings.ToLower(cb.table.String()), "% of fit") || !strings.Contains(cb.table.String(), "forward+backward") {
		t.Errorf("report at OnFitEnd:\n%s", cb.table.String())
	}
	if !strings.Contains(out.String(), "callbacks/slowFitEnds.OnFitEnd") {
		t.Errorf("Fit printed no profiler table:\n%s", out.String())
	}
}
