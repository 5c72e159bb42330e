package callbacks_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// redirect points *std (os.Stdout or os.Stderr) at a file for the test and
// returns a function reading what was written to it.
func redirect(t *testing.T, std **os.File) func() string {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	old := *std
	*std = f
	t.Cleanup(func() { *std = old; f.Close() })
	return func() string {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// The zero ProgressBar, ModelSummary and DeviceStatsMonitor (struct
// literals, as a Go programmer writes a type whose fields all have
// defaults) work as their constructors' defaults do; before, their first
// hook failed with a nil pointer.
func TestZeroProgressBarDrawsOnStderr(t *testing.T) {
	read := redirect(t, &os.Stderr)
	if _, err := fit(t, trainer.Config{MaxEpochs: 1, EnableProgressBar: trainer.Bool(true), Callbacks: []trainer.Callback{&callbacks.ProgressBar{}}}, true); err != nil {
		t.Fatal(err)
	}
	out := read()
	for _, w := range []string{"epoch 0/0 batch 16/16", "validation epoch 0"} {
		if !strings.Contains(out, w) {
			t.Errorf("stderr %q does not show %q", out, w)
		}
	}
}

func TestZeroModelSummaryPrintsAllLayersOnStdout(t *testing.T) {
	read := redirect(t, &os.Stdout)
	if _, err := fit(t, trainer.Config{MaxEpochs: 1, Callbacks: []trainer.Callback{&callbacks.ModelSummary{}}}, false); err != nil {
		t.Fatal(err)
	}
	if out := read(); !strings.Contains(out, "Total params") {
		t.Errorf("stdout %q has no summary", out)
	}
}

func TestZeroDeviceStatsMonitorSamplesTheProcess(t *testing.T) {
	d := &callbacks.DeviceStatsMonitor{}
	_, err := fit(t, trainer.Config{MaxEpochs: 1, LogEveryNSteps: 1, Callbacks: []trainer.Callback{d}}, false)
	if runtime.GOOS != "linux" {
		// The default sample reads /proc: elsewhere the zero value says
		// to set Sample, as NewDeviceStatsMonitor does.
		if err == nil || !strings.Contains(err.Error(), "DeviceStatsConfig.Sample") {
			t.Errorf("Fit with a zero DeviceStatsMonitor on %s: %v, want an error naming DeviceStatsConfig.Sample", runtime.GOOS, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Last()["cpu_pct"]; !ok {
		t.Errorf("Last() = %v: no cpu_pct sampled", d.Last())
	}
}

// A Timer has no default budget: a struct literal is refused when the
// trainer is made, naming the constructor; before, it silently never
// stopped training.
func TestZeroTimerIsRefusedNamingNewTimer(t *testing.T) {
	_, err := trainer.New(trainer.Config{Out: os.Stderr, Callbacks: []trainer.Callback{&callbacks.Timer{}}})
	if err == nil || !strings.Contains(err.Error(), "callbacks.NewTimer") {
		t.Errorf("trainer.New with &callbacks.Timer{}: %v\nwant an error naming callbacks.NewTimer", err)
	}
}
