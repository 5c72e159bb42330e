package dp_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/device/fakedevice"
	"github.com/fulgur-ml/fulgur/strategy/dp"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

func TestDPConformance(t *testing.T) {
	strategytest.RunAll(t, func(t testing.TB, n int) []strategy.Strategy {
		devs, err := fakedevice.New(n)
		if err != nil {
			t.Fatal(err)
		}
		dp, err := dp.NewDP(dp.DPConfig{Devices: devs})
		if err != nil {
			t.Fatal(err)
		}
		return []strategy.Strategy{dp}
	})
}

func TestDPFailingDeviceIsNamed(t *testing.T) {
	devs, err := fakedevice.New(3, fakedevice.FailAfter(2, 2)) // a step is two units: train, then copy the update
	if err != nil {
		t.Fatal(err)
	}
	dp, _ := dp.NewDP(dp.DPConfig{Devices: devs})
	ctx := context.Background()
	ds, _ := strategytest.Regression(12, 4, 2, 1)
	if err := strategytest.SetupAll(ctx, []strategy.Strategy{dp}, &strategytest.MLP{In: 4, Hidden: 4, Out: 2}, ds.Fields(), 1); err != nil {
		t.Fatal(err)
	}
	b, _ := strategytest.Rows(ds, 0, 6)
	if _, _, err := strategytest.Step(ctx, []strategy.Strategy{dp}, strategy.OptimizerOptions{}, b); err != nil {
		t.Fatalf("first step: %v", err)
	}
	_, _, err = strategytest.Step(ctx, []strategy.Strategy{dp}, strategy.OptimizerOptions{}, b)
	if !errors.Is(err, device.ErrFailed) || !strings.Contains(err.Error(), "replica 2 on fake:2") {
		t.Fatalf("second step error = %v, want a device failure naming replica 2 on fake:2", err)
	}
}

func TestDPSmallBatchLeavesReplicasIdle(t *testing.T) {
	// A batch of 2 rows on 3 devices runs on two replicas; the idle one's
	// stale gradients must not be summed in.
	devs, _ := fakedevice.New(3)
	dp, _ := dp.NewDP(dp.DPConfig{Devices: devs})
	ref := single.NewSingle()
	ctx := context.Background()
	ds, _ := strategytest.Regression(8, 4, 2, 1)
	m := &strategytest.MLP{In: 4, Hidden: 4, Out: 2}
	for _, s := range []strategy.Strategy{dp, ref} {
		if err := strategytest.SetupAll(ctx, []strategy.Strategy{s}, m, ds.Fields(), 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, rows := range [][2]int{{0, 6}, {6, 8}} {
		b, _ := strategytest.Rows(ds, rows[0], rows[1])
		for _, s := range []strategy.Strategy{dp, ref} {
			if _, _, err := strategytest.Step(ctx, []strategy.Strategy{s}, strategy.OptimizerOptions{}, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, want := dp.Store().Data32(), ref.Store().Data32()
	for i := range want {
		if d := got[i] - want[i]; d > 1e-6 || d < -1e-6 {
			t.Fatalf("parameter %d: dp %g, single %g", i, got[i], want[i])
		}
	}
}

func TestDPRegistered(t *testing.T) {
	s, err := strategy.New("dp", strategy.Options{Devices: 2})
	if err != nil || s.Info().Name != "dp" {
		t.Fatalf("New(\"dp\") = %v, %v", s, err)
	}
	if _, err := strategy.New("dp", strategy.Options{Devices: 2, NumNodes: 2}); err == nil || !strings.Contains(err.Error(), "NumNodes is 2") {
		t.Fatalf("dp over 2 nodes: error %v, want one naming NumNodes", err)
	}
}

// Store and ReplicaStores are nil before Setup, as strategy.Replica and
// Trainer.Store say, not an index out of range.
func TestStoresBeforeSetupAreNil(t *testing.T) {
	d, err := dp.NewDP(dp.DPConfig{Devices: []device.Device{device.NewCPU(0), device.NewCPU(1)}})
	if err != nil {
		t.Fatal(err)
	}
	if st := d.Store(); st != nil {
		t.Errorf("Store before Setup = %v, want nil", st)
	}
	if sts := d.ReplicaStores(); sts != nil {
		t.Errorf("ReplicaStores before Setup = %v, want nil", sts)
	}
}

// OptimizerStep and Rebind before Setup are errors, as Step's is.
func TestOptimizerStepAndRebindBeforeSetupAreErrors(t *testing.T) {
	d, err := dp.NewDP(dp.DPConfig{Devices: []device.Device{device.NewCPU(0), device.NewCPU(1)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.OptimizerStep(t.Context(), strategy.OptimizerOptions{}); err == nil || !strings.Contains(err.Error(), "OptimizerStep before Setup") {
		t.Errorf("OptimizerStep before Setup = %v, want an error saying so", err)
	}
	if err := d.Rebind(&strategytest.MLP{In: 2, Hidden: 1, Out: 1}); err == nil || !strings.Contains(err.Error(), "Rebind before Setup") {
		t.Errorf("Rebind before Setup = %v, want an error saying so", err)
	}
}

// Every nil entry of Devices is named at once, with the fix, not only the
// first.
func TestNewDPNamesEveryNilDevice(t *testing.T) {
	_, err := dp.NewDP(dp.DPConfig{Devices: []device.Device{nil, device.NewCPU(1), nil}})
	for _, want := range []string{"Devices[0] and Devices[2] are nil", `device.Open("cpu", n)`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewDP with two nil devices: %v, want it to say %q", err, want)
		}
	}
	_, err = dp.NewDP(dp.DPConfig{Devices: []device.Device{device.NewCPU(0), nil}})
	if err == nil || !strings.Contains(err.Error(), "Devices[1] is nil") {
		t.Errorf("NewDP with one nil device: %v, want it to say Devices[1] is nil", err)
	}
}
