package strategy_test

import (
	"fmt"
	"strings"

	"github.com/fulgur-ml/fulgur/strategy"
)

// custom stands for a strategy of the program's own. A real one
// implements the eight methods of Strategy (strategy/single is the
// smallest); here all but Info are left to the embedded interface.
type custom struct {
	strategy.Strategy
	devices int
}

func (c custom) Info() strategy.Info {
	return strategy.Info{Name: "custom", WorldSize: 1, GlobalZero: true}
}

// newCustom is custom's Factory. It gets the layout the program asked
// for, with New's defaults filled in, and refuses one it cannot run,
// naming the setting as its user knows it (Options.Name: the
// trainer.Config field, or the command line's flag).
func newCustom(o strategy.Options) (strategy.Strategy, error) {
	if o.NumNodes != 1 || o.Devices > 2 {
		return nil, fmt.Errorf("strategy \"custom\" runs one or two devices on one node; %s is %d", o.Name("Devices"), o.Devices)
	}
	return custom{devices: o.Devices}, nil
}

// A package registers its strategies once, in an init function, as
// database/sql drivers do: Register panics on a name registered already.
func init() {
	strategy.Register("custom", newCustom)
}

// Register makes a strategy available by name, to New and so to
// trainer.Config.Strategy, as the shipped ones are. Libraries and tests
// pass a strategy value instead (trainer.Config.StrategyImpl).
func ExampleRegister() {
	fmt.Println(strategy.Names(), strategy.Known("custom"))

	s, err := strategy.New("custom", strategy.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %d device\n", s.Info().Name, s.(custom).devices)

	_, err = strategy.New("custom", strategy.Options{Devices: 4})
	fmt.Println(err)
	flag := func(field string) string { return "-" + strings.ToLower(field) }
	_, err = strategy.New("custom", strategy.Options{Devices: 4, SettingName: flag})
	fmt.Println(err)
	_, err = strategy.New("Custom", strategy.Options{})
	fmt.Println(err)
	// Output:
	// [auto custom] true
	// custom: 1 device
	// strategy "custom" runs one or two devices on one node; Devices is 4
	// strategy "custom" runs one or two devices on one node; -devices is 4
	// strategy "Custom" is not available: names are lower case: write "custom" (one of [auto custom])
}
