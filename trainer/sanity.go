package trainer

import (
	"context"
	"maps"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
)

// sanityValidation runs the sanity check's n validation batches of val
// with the hooks Lightning calls there: OnSanityCheckStart, the validation
// loop's hooks with State.SanityChecking set, OnSanityCheckEnd. The
// check's metrics (reduced across ranks as a validation's) are in
// State.Metrics for its validation-end hooks only: afterwards the metrics
// are as before the check, and neither they nor those a callback logs
// during the check reach a logger. A Stop a hook asks for ends the Fit
// before training.
func (t *Trainer) sanityValidation(ctx context.Context, val *data.Loader, n int) (err error) {
	st := &t.state
	metrics, fromVal, stepNewer, log := maps.Clone(st.Metrics), maps.Clone(st.fromVal), maps.Clone(st.stepNewer), st.log
	st.SanityChecking = true
	st.log = func(map[string]float64) error { return nil }
	defer func() {
		st.SanityChecking, st.log = false, log
		st.Metrics, st.fromVal, st.stepNewer = metrics, fromVal, stepNewer
	}()
	stop, err := splitStop(t.onSanityCheckStart(ctx))
	if err != nil {
		return err
	}
	aggs, s, err := t.evalLoop(ctx, t.mod, module.Validate, val, n)
	if err != nil {
		return err
	}
	vals, err := t.reduceAggs(ctx, aggs, true)
	if err != nil {
		return err
	}
	st.Metrics = maps.Clone(metrics)
	st.fromVal, st.stepNewer = maps.Clone(fromVal), maps.Clone(stepNewer)
	for name, v := range vals {
		st.setMetric(name, v, true)
	}
	if stop, err = splitStop(firstStop(firstStop(stop, s), t.onValidationEnd(ctx, t.mod, st.Epoch))); err != nil {
		return err
	}
	return firstStop(stop, t.onSanityCheckEnd(ctx))
}
