package fsdp_test

import (
	"fmt"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// Every FSDP rank calls TrainOptions.BeforeBackward with its loss once its
// forward pass has run and before any gradient op, whatever the units,
// resharding after forward, prefetching (which gathers the next unit while
// the forward pass ends) or holding micro-batches.
func TestFSDPBeforeBackward(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  fsdp.Config
	}{
		{"layer", fsdp.Config{}},
		{"size", fsdp.Config{Wrap: fsdp.WrapSize, MinUnitParams: 10}},
		{"keep-after-forward", fsdp.Config{Wrap: fsdp.WrapSize, MinUnitParams: 10, KeepAfterForward: true}},
		{"no-prefetch", fsdp.Config{Wrap: fsdp.WrapSize, MinUnitParams: 10, NoPrefetch: true}},
		{"sync-micro-batches", fsdp.Config{SyncMicroBatches: true}},
	} {
		for _, n := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/devices=%d", c.name, n), func(t *testing.T) {
				strategytest.BeforeBackward(t, func(t testing.TB, n int) []strategy.Strategy { return ranks(t, n, c.cfg) }, n)
			})
		}
	}
}
