package callbacks_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A newcomer who monitors val_loss but forgets Fit's validation loader is
// told that this is why the metric is missing, not only which were logged.
func TestMonitorMissingForWantOfValidationSaysSo(t *testing.T) {
	const hint = "this Fit has no validation loader"
	es, err := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "val_loss"})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Monitor: "val_loss"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cb   trainer.Callback
		name string
	}{{es, "EarlyStopping"}, {mc, "ModelCheckpoint"}} {
		_, err := fit(t, trainer.Config{MaxEpochs: 1, Callbacks: []trainer.Callback{c.cb}}, false)
		if err == nil || !strings.Contains(err.Error(), c.name+`(Monitor "val_loss"): the metric was not logged`) || !strings.Contains(err.Error(), hint) {
			t.Errorf("%s without validation: %v; want it to say %q", c.name, err, hint)
		}
	}
	// With validation, a misspelt name gets no such hint.
	es2, _ := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "val_los"})
	_, err = fit(t, trainer.Config{MaxEpochs: 1, Callbacks: []trainer.Callback{es2}}, true)
	if err == nil || strings.Contains(err.Error(), hint) {
		t.Errorf("a misspelt monitor beside validation: %v", err)
	}
}
