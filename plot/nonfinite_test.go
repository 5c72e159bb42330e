package plot_test

import (
	"math"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/plot"
)

// A run whose loss diverged: train_loss goes 0.5, 0.4, then NaN; val_loss
// ends at +Inf; grad_norm is NaN throughout. The report said train_loss
// ended at 0.4 and val_loss at 0.45 (the last finite values, at earlier
// steps) and left grad_norm out, so a diverged run read as a healthy one.
// The final value is now the last one logged, and the values column counts
// the non-finite ones.
func TestSummariesDivergedRunEndsOnNonFinite(t *testing.T) {
	const csv = "epoch,grad_norm,step,train_loss,val_loss\n" +
		"0,nan,10,0.5,\n0,nan,20,0.4,\n0,,20,,0.45\n" +
		"1,nan,30,nan,\n1,nan,40,nan,\n1,,40,,inf\n"
	h, err := plot.ReadCSV(strings.NewReader(csv), "metrics.csv")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]plot.Summary{}
	for _, s := range h.Summaries() {
		got[s.Key] = s
	}
	tl := got["train_loss"]
	if !math.IsNaN(tl.Final) || tl.FinalStep != 40 || tl.Best != 0.4 || tl.BestStep != 20 || tl.Min != 0.4 || tl.Max != 0.5 || tl.N != 2 || tl.NonFinite != 2 {
		t.Errorf("train_loss summary %+v, want final NaN at 40, best 0.4 at 20, min 0.4, max 0.5, 2 finite + 2 non-finite", tl)
	}
	vl := got["val_loss"]
	if !math.IsInf(vl.Final, 1) || vl.FinalStep != 40 || vl.Best != 0.45 || vl.N != 1 || vl.NonFinite != 1 {
		t.Errorf("val_loss summary %+v, want final +Inf at 40, best 0.45", vl)
	}
	gn, ok := got["grad_norm"]
	if !ok || !math.IsNaN(gn.Final) || gn.N != 0 || gn.NonFinite != 4 {
		t.Errorf("grad_norm summary %+v (present %v), want final NaN, 0 finite + 4 non-finite", gn, ok)
	}

	var b strings.Builder
	if err := (plot.Report{History: h}).WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| grad_norm | NaN | 40 | — | — | — | — | 0 (+4 NaN/Inf) |",
		"| train_loss | NaN | 40 | 0.4 (min) | 20 | 0.4 | 0.5 | 2 (+2 NaN/Inf) |",
		"| val_loss | +Inf | 40 | 0.45 (min) | 20 | 0.45 | 0.45 | 1 (+1 NaN/Inf) |",
	} {
		if !strings.Contains(b.String(), row+"\n") {
			t.Errorf("report lacks the row\n%s\nreport:\n%s", row, b.String())
		}
	}
}
