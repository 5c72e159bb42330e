package strategy_test

import (
	"fmt"

	"github.com/fulgur-ml/fulgur/strategy"
)

// A program names a strategy (trainer.Config.Strategy, a command line's
// -strategy) and New builds it from the packages that registered their
// names when linked. The trainer links every strategy fulgur ships; this
// program links none, so New says which package to import.
func ExampleNew() {
	_, err := strategy.New("single", strategy.Options{})
	fmt.Println(err)
	// "auto" picks by the layout: "single" for one device on one node,
	// "ddp" for more.
	_, err = strategy.New("auto", strategy.Options{Devices: 2})
	fmt.Println(err)
	// Output:
	// strategy "single" is not available: package github.com/fulgur-ml/fulgur/strategy/single registers it; import it blank (import _ "github.com/fulgur-ml/fulgur/strategy/single") or build through the trainer, which links it
	// strategy "ddp" is not available: package github.com/fulgur-ml/fulgur/strategy/ddp registers it; import it blank (import _ "github.com/fulgur-ml/fulgur/strategy/ddp") or build through the trainer, which links it
}
