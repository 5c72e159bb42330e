package plot_test

import (
	"math"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/plot"
)

// A Test or Validate after a Fit logs at the Fit's last step with the
// epochs completed (Lightning's current_epoch: 2 after two epochs, where
// the last epoch's own rows say 1): that row is no epoch of training, so it
// is drawn against step only, and the validation metric keeps its chart by
// epoch.
func TestEvaluationRowsAfterFitAreNotEpochs(t *testing.T) {
	csv := `epoch,step,test_acc,train_loss_epoch,val_acc
0,5,,2.1,
0,5,,,0.41
1,10,,1.8,
1,10,,,0.57
2,10,0.57,,
2,10,,,0.58
`
	h, err := plot.ReadCSV(strings.NewReader(csv), "metrics.csv")
	if err != nil {
		t.Fatal(err)
	}
	if h.EpochLevel("test_acc") {
		t.Errorf("test_acc, logged after the Fit, is drawn by epoch (at %v epochs completed of 2)", h.Series("test_acc")[0].Epoch+1)
	}
	if !h.EpochLevel("val_acc") || !h.EpochLevel("train_loss_epoch") {
		t.Errorf("val_acc (epoch-level %v) and train_loss_epoch (%v) must keep their charts by epoch", h.EpochLevel("val_acc"), h.EpochLevel("train_loss_epoch"))
	}
	if n := len(h.Series("val_acc")); n != 3 {
		t.Errorf("val_acc has %d points by step; want 3 (the Validate's too)", n)
	}
	if e := h.Rows[4].Epoch; !math.IsNaN(e) {
		t.Errorf("the Test's row has epoch %v; want NaN (no epoch of training)", e)
	}
}
