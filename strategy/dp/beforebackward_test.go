package dp_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/device/fakedevice"
	"github.com/fulgur-ml/fulgur/strategy/dp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// A replica that fails before its forward pass ends frees the others
// waiting for the hook: Step names the failed replica, and the hook, which
// needs every replica's loss, is not called.
func TestDPBeforeBackwardWithAFailedReplica(t *testing.T) {
	devs, err := fakedevice.New(3, fakedevice.FailAt(2))
	if err != nil {
		t.Fatal(err)
	}
	s, err := dp.NewDP(dp.DPConfig{Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ds, _ := strategytest.Regression(6, 4, 2, 1)
	if err := strategytest.SetupAll(ctx, []strategy.Strategy{s}, &strategytest.MLP{In: 4, Hidden: 4, Out: 2}, ds.Fields(), 1); err != nil {
		t.Fatal(err)
	}
	b, _ := strategytest.Rows(ds, 0, 6)
	calls := 0
	_, err = s.Step(ctx, module.Train, b, strategy.TrainOptions{Sync: true, Scale: 1, BeforeBackward: func(float64) error {
		calls++
		return nil
	}})
	if ctx.Err() != nil {
		t.Fatalf("Step returned only once its context expired (%v): the failed replica did not free the others", err)
	}
	if !errors.Is(err, device.ErrFailed) || !strings.Contains(err.Error(), "replica 2 on fake:2") || calls != 0 {
		t.Fatalf("Step: %v, with the hook called %d times; want replica 2's failure and no call", err, calls)
	}
}
