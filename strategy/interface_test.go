package strategy_test

import (
	"reflect"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
)

// The required interface stays small; abilities are optional interfaces
// (Replica, Launcher, FitRunner, Rebinder, Sampler, MemoryReporter).
func TestStrategyInterfaceIsSmall(t *testing.T) {
	typ := reflect.TypeOf((*strategy.Strategy)(nil)).Elem()
	if n := typ.NumMethod(); n > 8 {
		var names []string
		for i := range n {
			names = append(names, typ.Method(i).Name)
		}
		t.Errorf("strategy.Strategy has %d methods %v: keep it at 8 or fewer and move abilities to optional interfaces", n, names)
	}
}
