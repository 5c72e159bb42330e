package trainer

import (
	"context"
	"errors"
	"fmt"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
)

// WeightsSHA256 is module.Store.SHA256 of the weights this Trainer holds
// (after Fit: the trained ones), on rank 0, whatever the strategy: two
// runs whose weights are equal bit for bit give the same hash, whether
// their ranks hold the whole model (Store) or shards of it (fsdp). Every
// rank calls it at the same point: a strategy without a whole replica in
// this process gathers its shards onto rank 0 first, as a checkpoint save
// does (rank 0 then holds the whole model once). Ranks other than 0 get "".
func (t *Trainer) WeightsSHA256(ctx context.Context) (string, error) {
	if ctx == nil {
		return "", errNilContext("WeightsSHA256")
	}
	if t.strat == nil {
		return "", errors.New("WeightsSHA256: no weights before Fit, Validate, Test or Predict has set the model up")
	}
	if st := t.store(); st != nil {
		if !t.IsGlobalZero() {
			return "", nil
		}
		return st.SHA256(), nil
	}
	sd, err := t.strat.SaveState(ctx, strategy.SaveOptions{Full: true}) // every rank: it gathers shards
	if err != nil {
		return "", fmt.Errorf("WeightsSHA256: %w", err)
	}
	if !t.IsGlobalZero() {
		return "", nil
	}
	st, err := module.NewStoreWithoutGrad(t.specs, t.dtype(), 0)
	if err != nil {
		return "", fmt.Errorf("WeightsSHA256: %w", err)
	}
	if err := strategy.LoadStore(sd, st); err != nil {
		return "", fmt.Errorf("WeightsSHA256: %w", err)
	}
	return st.SHA256(), nil
}

// rank0Value is State.Rank0Value: a sum in which only rank 0's term is
// not zero, so it arrives exactly (NaN and infinities too).
func (t *Trainer) rank0Value(ctx context.Context, v float64) (float64, error) {
	if t.strat.Info().WorldSize <= 1 {
		return v, nil
	}
	x := []float64{0}
	if t.strat.Info().GlobalZero {
		x[0] = v
	}
	if err := t.strat.Reduce(ctx, x, []float64{0}, []module.Reduce{module.Sum}); err != nil {
		return 0, fmt.Errorf("take rank 0's value: %w", err)
	}
	return x[0], nil
}
