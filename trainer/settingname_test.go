package trainer_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
	"github.com/rs/zerolog"
)

// flagNames is a SettingName as a command line's: "-maxepochs" for
// MaxEpochs.
func flagNames(setting string) string { return "-" + strings.ToLower(setting) }

// Config.SettingName is how the trainer's errors and log lines name a
// field: a library user reads the Go names, a command line its flags, in
// Validate's errors, its warnings (FastDevRun's overrides, Devices above
// the cores), the loop's LogEveryNSteps warning and LRFind's refusal of
// several devices ("1 node", not "1 nodes").
func TestSettingNameNamesFieldsInErrorsAndLogs(t *testing.T) {
	ds := regression(t, 64, 0, 1)
	for _, c := range []struct {
		name    string
		names   func(string) string
		want    []string
		goNames []string // what must not appear
	}{
		{"library", nil, []string{
			"MinEpochs is 5 and MaxEpochs 2: MaxEpochs ends training first",
			"FastDevRun replaces these settings", `"MaxEpochs=5"`, "use Devices <= cores",
			"LogEveryNSteps is above the epoch's optimizer steps",
			`LRFind: Strategy is "ddp" on 2 devices and 1 node: the search runs on one device`, "a trainer of Devices 1 and Strategy auto or single",
		}, []string{"1 nodes", "-maxepochs"}},
		{"flags", flagNames, []string{
			"-minepochs is 5 and -maxepochs 2: -maxepochs ends training first",
			"-fastdevrun replaces these settings", `"-maxepochs=5"`, "use -devices <= cores",
			"-logeverynsteps is above the epoch's optimizer steps",
			`LRFind: -strategy is "ddp" on 2 devices and 1 node: the search runs on one device`, "a trainer of -devices 1 and -strategy auto or single",
		}, []string{"1 nodes", "MinEpochs", "MaxEpochs", "FastDevRun", "Devices", "LogEveryNSteps", "Strategy"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			log := zerolog.New(&out)
			text := func(err error) {
				if err == nil {
					t.Fatal("no error")
				}
				out.WriteString(err.Error() + "\n")
			}
			// Validate: an error and two warnings.
			text((&trainer.Config{MinEpochs: 5, MaxEpochs: 2, SettingName: c.names, Log: &log}).Validate())
			cfg := trainer.Config{FastDevRun: 1, MaxEpochs: 5, Devices: runtime.NumCPU() + 1, Strategy: "ddp", SettingName: c.names, Log: &log}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			// The loop: 2 steps an epoch under the default 50.
			cfg = quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir(), DisableCheckpointing: true, SettingName: c.names})
			cfg.Log = &log
			tr, err := trainer.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), nil); err != nil {
				t.Fatal(err)
			}
			tr, err = trainer.New(quiet(trainer.Config{Devices: 2, Strategy: "ddp", SettingName: c.names}))
			if err != nil {
				t.Fatal(err)
			}
			_, err = tr.LRFind(context.Background(), &linreg{in: 4, lr: 0.01, sgd: true}, loader(t, ds, 32, false, false), trainer.LRFindConfig{})
			text(err)
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("want %q in\n%s", w, out.String())
				}
			}
			for _, n := range c.goNames {
				if strings.Contains(out.String(), n) {
					t.Errorf("%q in\n%s", n, out.String())
				}
			}
		})
	}
}

// stepFails is linreg whose TrainingStep returns err.
type stepFails struct {
	linreg
	err error
}

func (m *stepFails) TrainingStep(*module.Step) (*G.Node, error) { return nil, m.err }

// A module's own error reaches the caller as the module wrote it, under a
// SettingName too: only the trainer's words are named by it.
func TestSettingNameLeavesModuleErrorsAlone(t *testing.T) {
	own := errors.New("my step: Seed and Strategy disagree (see Devices.md)")
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, SettingName: flagNames}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), &stepFails{linreg{in: 4, lr: 0.01}, own}, loader(t, regression(t, 64, 0, 1), 32, false, false), nil)
	if !errors.Is(err, own) || !strings.Contains(err.Error(), own.Error()) {
		t.Errorf("err = %v\nwant the module's %q as it wrote it", err, own)
	}
}
