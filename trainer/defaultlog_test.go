package trainer_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// The default logger writes Info and above: the trainer's Debug lines (a
// repeat of Ctrl-C that a shell sent to the whole process group) are for a
// logger the user passes, not for every run's output as "DBG ...".
func TestDefaultLogHidesDebug(t *testing.T) {
	var out bytes.Buffer
	tr, err := trainer.New(trainer.Config{Out: &out, DefaultRootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	log := tr.Config().Log
	if log == nil {
		t.Fatal("Config().Log is nil after New: want the default logger")
	}
	log.Debug().Msg("a debug line")
	log.Info().Msg("an info line")
	if s := out.String(); strings.Contains(s, "a debug line") || !strings.Contains(s, "an info line") {
		t.Errorf("the default logger wrote:\n%s\nwant the info line and not the debug line", s)
	}
}
