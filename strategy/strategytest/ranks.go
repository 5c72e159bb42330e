package strategytest

import (
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/device/fakedevice"
)

// Ranks makes n in-process ranks: an inproc group (a 20 s timeout, then
// gopts) and n fake devices (dopts), rank r built by build from its member
// of the group and its device. It fails the test on any error.
func Ranks(t testing.TB, n int, gopts []inproc.Option, dopts []fakedevice.Option, build func(g collective.Collective, d device.Device) (strategy.Strategy, error)) []strategy.Strategy {
	t.Helper()
	group, err := inproc.NewGroup(n, append([]inproc.Option{inproc.Timeout(20 * time.Second)}, gopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := fakedevice.New(n, dopts...)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]strategy.Strategy, n)
	for r := range out {
		if out[r], err = build(group[r], devs[r]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
