package single_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

func TestSingleConformance(t *testing.T) {
	strategytest.RunAll(t, func(t testing.TB, n int) []strategy.Strategy {
		if n > 1 {
			t.Skip("single runs one device")
		}
		return []strategy.Strategy{single.NewSingle()}
	})
}

// Linking the package registers "single"; it refuses more than one device.
func TestSingleRegistered(t *testing.T) {
	s, err := strategy.New("single", strategy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Info().Name; got != "single" {
		t.Errorf("New(\"single\") built %q", got)
	}
	if _, err := strategy.New("single", strategy.Options{Devices: 2}); err == nil {
		t.Error("New(\"single\", Devices 2) = nil error, want a refusal naming Devices")
	}
}

// Store is nil before Setup, as strategy.Replica and Trainer.Store say,
// not a nil dereference.
func TestStoreBeforeSetupIsNil(t *testing.T) {
	if st := single.NewSingle().Store(); st != nil {
		t.Errorf("Store before Setup = %v, want nil", st)
	}
}

// OptimizerStep before Setup is an error, as Step's is.
func TestOptimizerStepBeforeSetupIsAnError(t *testing.T) {
	_, err := single.NewSingle().OptimizerStep(t.Context(), strategy.OptimizerOptions{})
	if err == nil || !strings.Contains(err.Error(), "OptimizerStep before Setup") {
		t.Errorf("OptimizerStep before Setup = %v, want an error saying so", err)
	}
}
