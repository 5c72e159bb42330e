package cli_test

import (
	"flag"
	"io"
	"testing"

	"github.com/fulgur-ml/fulgur/internal/cli"
)

func TestFastDevRunSpellings(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 0},
		{[]string{"-fast-dev-run"}, 1},
		{[]string{"--fast-dev-run"}, 1},
		{[]string{"-fast-dev-run", "-seed", "3"}, 1},
		{[]string{"-fast-dev-run", "5"}, 5},
		{[]string{"-fast-dev-run", "5", "-seed", "3"}, 5},
		{[]string{"-fast-dev-run=7"}, 7},
		{[]string{"-fast-dev-run=0"}, 0},
		{[]string{"-fast-dev-run=true"}, 1},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f cli.Flags
		f.Register(fs, cli.Flags{MaxEpochs: 1, BatchSize: 8, LR: 0.1})
		if err := cli.Parse(fs, c.args); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if f.FastDevRun != c.want || fs.NArg() != 0 {
			t.Errorf("%q: FastDevRun = %d, arguments left %q; want %d and none", c.args, f.FastDevRun, fs.Args(), c.want)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f cli.Flags
	f.Register(fs, cli.Flags{})
	if err := cli.Parse(fs, []string{"-fast-dev-run=-2"}); err == nil {
		t.Error("-fast-dev-run=-2 was accepted")
	}
}
