package ddp_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
)

// A program that registers "ddp" itself, which this package registers when
// linked (and the trainer links it), is told so when it starts, with the
// two ways to train with a strategy of its own, and "ddp" stays this
// package's: the later registration no longer silently replaces it.
func TestRegisterOverAShippedNamePanics(t *testing.T) {
	func() {
		defer func() {
			msg, _ := recover().(string)
			for _, want := range []string{`Register("ddp") called twice`, "package github.com/fulgur-ml/fulgur/strategy/ddp registered it already", "a name of its own", "StrategyImpl"} {
				if !strings.Contains(msg, want) {
					t.Errorf("Register(\"ddp\") panicked with %q, want it to say %q", msg, want)
				}
			}
		}()
		strategy.Register("ddp", func(strategy.Options) (strategy.Strategy, error) { return nil, nil })
	}()
	s, err := strategy.New("ddp", strategy.Options{Devices: 1, Lookup: lookupOf(nil)})
	if _, ok := s.(*ddp.DDP); err != nil || !ok {
		t.Errorf(`New("ddp") = %T, %v after a second Register("ddp"), want this package's *ddp.DDP`, s, err)
	}
}
