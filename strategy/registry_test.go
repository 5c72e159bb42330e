package strategy_test

import (
	"errors"
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

// A shipped name in the wrong case is corrected to the name, and its
// package named, in a binary that does not link it, as in one that does.
func TestNewCorrectsTheCaseOfAShippedNameNotLinked(t *testing.T) {
	_, err := strategy.New(" DDP", strategy.Options{})
	if err == nil || !strings.Contains(err.Error(), `names are lower case: write "ddp"`) || !strings.Contains(err.Error(), `import _ "github.com/fulgur-ml/fulgur/strategy/ddp"`) {
		t.Errorf("New(%q) = %v, want the lower-case name and the blank import of strategy/ddp", " DDP", err)
	}
}

// "auto" with one device picks "ddp" in a rank a launcher (torchrun,
// mpirun, srun, fulgur run) started, and "single" in a rank that a
// program's own ddp or ddp_spawn started: such a rank runs the whole
// program again, and a one-device trainer it meets before the distributed
// one joined the job, which then failed with ranks disagreeing (ddp) or
// hung (ddp_spawn). The error names the package of the strategy chosen,
// which this binary does not link.
func TestAutoInASelfLaunchedRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no launcher", nil, "strategy/single"},
		{"torchrun", map[string]string{"WORLD_SIZE": "2", "RANK": "1"}, "strategy/ddp"},
		{"fulgur run", map[string]string{"WORLD_SIZE": "2", "RANK": "1", "FULGUR_LAUNCHER": "elastic"}, "strategy/ddp"},
		{"ddp's own rank", map[string]string{"WORLD_SIZE": "2", "RANK": "1", "FULGUR_LAUNCHER": "ddp"}, "strategy/single"},
		{"ddp_spawn's worker", map[string]string{"WORLD_SIZE": "2", "RANK": "0", "FULGUR_LAUNCHER": "ddp_spawn"}, "strategy/single"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			_, err := strategy.New("auto", strategy.Options{Devices: 1, Lookup: lookup})
			if err == nil || !strings.Contains(err.Error(), `"github.com/fulgur-ml/fulgur/`+tc.want+`"`) {
				t.Errorf("New(auto) = %v, want the error naming %s", err, tc.want)
			}
		})
	}
}

// Register refuses what New could never build: "auto" (New picks a
// strategy for it before looking), an empty name, a nil factory. Each is a
// mistake in the program, found when it starts.
func TestRegisterRefusesWhatNewCannotBuild(t *testing.T) {
	f := func(strategy.Options) (strategy.Strategy, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		f    strategy.Factory
		want string
	}{
		{"auto", f, `"auto"`},
		{"", f, "empty"},
		{"nilfactory", nil, "nil"},
	} {
		func() {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, tc.want) {
					t.Errorf("Register(%q) panicked with %v, want a message naming %s", tc.name, r, tc.want)
				}
			}()
			strategy.Register(tc.name, tc.f)
		}()
	}
	if strategy.Known("nilfactory") {
		t.Error(`Register("nilfactory", nil) registered it`)
	}
}

// A name registered twice is a mistake in the program, as a database/sql
// driver's is: two packages claiming one name, the later silently built
// for both (which one wins hangs on the order of their init functions).
// Register panics naming it, and the first registration stays: here
// "custom", which example_register_test.go's init registers.
func TestRegisterTwicePanics(t *testing.T) {
	func() {
		defer func() {
			msg, _ := recover().(string)
			for _, want := range []string{`Register("custom") called twice`, "an earlier call registered it already", "a name of its own", "StrategyImpl"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the second Register(\"custom\") panicked with %q, want it to say %q", msg, want)
				}
			}
		}()
		strategy.Register("custom", func(strategy.Options) (strategy.Strategy, error) { return nil, errors.New("the second factory") })
	}()
	if s, err := strategy.New("custom", strategy.Options{}); err != nil || s.Info().Name != "custom" {
		t.Errorf(`New("custom") = %v, %v, want the first registration's strategy`, s, err)
	}

	// A layout check, likewise. The first check is registered once per
	// process: go test -count=2 runs this again.
	if strategy.Check("twice", strategy.Options{}) == nil {
		strategy.RegisterCheck("twice", func(strategy.Options) error { return errors.New("the first check") })
	}
	func() {
		defer func() {
			if msg, _ := recover().(string); !strings.Contains(msg, `RegisterCheck("twice") called twice`) {
				t.Errorf("the second RegisterCheck(\"twice\") panicked with %q, want it to name the strategy and say it has a check already", msg)
			}
		}()
		strategy.RegisterCheck("twice", func(strategy.Options) error { return errors.New("the second check") })
	}()
	if err := strategy.Check("twice", strategy.Options{}); err == nil || err.Error() != "the first check" {
		t.Errorf(`Check("twice") = %v, want the first check's error`, err)
	}
}
