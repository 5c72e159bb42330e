package strategy_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
)

// This test binary links the interface package only: the shipped names are
// unknown here, and asking for one names the package that registers them.
func TestNewNamesTheImportOfTheShippedStrategies(t *testing.T) {
	for name, pkg := range map[string]string{"single": "single", "dp": "dp", "ddp": "ddp", "ddp_spawn": "ddp", "sharded": "sharded"} {
		if strategy.Known(name) {
			t.Errorf("Known(%q) is true in a binary that links no strategy implementation: the interface package registers an implementation", name)
		}
		_, err := strategy.New(name, strategy.Options{})
		if err == nil || !strings.Contains(err.Error(), `import _ "github.com/fulgur-ml/fulgur/strategy/`+pkg+`"`) {
			t.Errorf("New(%q) = %v, want an error naming the blank import of strategy/%s", name, err, pkg)
		}
	}
	_, err := strategy.New("nosuch", strategy.Options{})
	if err == nil || !strings.Contains(err.Error(), `strategy "nosuch" is not available: use one of`) {
		t.Errorf("New(%q) = %v, want the list of known names", "nosuch", err)
	}
}
