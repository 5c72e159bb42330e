package callbacks_test

import (
	"math"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
)

// tbPoint is one scalar as TensorBoard shows it.
type tbPoint struct {
	Step  int64
	Value float32
}

// tensorBoardScalars reads the event files of a run directory as
// TensorBoard's event accumulator does (plugin_event_accumulator.py since
// TensorBoard 2.5): files in name order; the first SessionLog START of the
// run is its start, and every later one drops the points already read
// whose step is at or past its own; the first metadata of a tag is the
// only one kept. It returns the scalars by tag and the hyperparameter
// names of the session_start_info TensorBoard keeps.
func tensorBoardScalars(t *testing.T, dir string) (map[string][]tbPoint, []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	scalars := map[string][]tbPoint{}
	var hparams []string
	seenStart, seenHParams := false, false
	for _, f := range files {
		for _, rec := range readTFRecords(t, f) {
			ev := fields(t, rec)
			var step int64
			if s := ev[2]; len(s) > 0 {
				step = int64(s[0].(uint64))
			}
			if sl := ev[7]; len(sl) > 0 && fields(t, sl[0].([]byte))[1][0].(uint64) == 1 {
				if seenStart {
					for tag, pts := range scalars {
						kept := pts[:0]
						for _, p := range pts {
							if p.Step < step {
								kept = append(kept, p)
							}
						}
						scalars[tag] = kept
					}
				}
				seenStart = true
			}
			for _, s := range ev[5] {
				for _, v := range fields(t, s.([]byte))[1] {
					val := fields(t, v.([]byte))
					tag := string(val[1][0].([]byte))
					if md := val[9]; len(md) > 0 {
						if tag == "_hparams_/session_start_info" && !seenHParams {
							seenHParams = true
							pd := fields(t, fields(t, md[0].([]byte))[1][0].([]byte))
							ssi := fields(t, fields(t, pd[2][0].([]byte))[3][0].([]byte))
							for _, e := range ssi[1] {
								hparams = append(hparams, string(fields(t, e.([]byte))[1][0].([]byte)))
							}
						}
						continue
					}
					if sv := val[2]; len(sv) > 0 {
						scalars[tag] = append(scalars[tag], tbPoint{step, math.Float32frombits(uint32(sv[0].(uint64)))})
					}
				}
			}
		}
	}
	return scalars, hparams
}

// A run logged steps 1-5, stopped, and resumed from its checkpoint at step
// 3 into the same directory. The resumed logger wrote one SessionLog
// START, as PyTorch's purge_step does, but TensorBoard takes a run's first
// START for its start, so it purged nothing: train_loss showed steps 4 and
// 5 twice, the abandoned values beside the resumed ones.
func TestTensorBoardResumeShowsEachStepOnce(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Unix(1700000000, 0)
	first, err := callbacks.NewTensorBoardLogger(dir, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= 5; s++ {
		if err := first.LogMetrics(s, map[string]float64{"train_loss": float64(s)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Finalize("failed"); err != nil {
		t.Fatal(err)
	}
	// The resumed process starts later, so its file sorts after.
	again, err := callbacks.NewTensorBoardLogger(dir, func() time.Time { return t0.Add(time.Minute) })
	if err != nil {
		t.Fatal(err)
	}
	resumeAtThree(t, again)
	got, _ := tensorBoardScalars(t, dir)
	want := []tbPoint{{1, 1}, {2, 2}, {3, 3}, {4, 40}, {5, 50}}
	if !reflect.DeepEqual(got["train_loss"], want) {
		t.Errorf("TensorBoard shows train_loss %v, want %v", got["train_loss"], want)
	}
}

// The CLI logs its flags, then the module its hyperparameters: two
// LogHyperparams calls before the first scalars. Each wrote a
// session_start_info summary, and TensorBoard keeps only a tag's first
// metadata, so its HParams tab showed the first call's names only. The
// summary is now written once, with both.
func TestTensorBoardHParamsOfEveryCallBeforeScalars(t *testing.T) {
	dir := t.TempDir()
	l, err := callbacks.NewTensorBoardLogger(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LogHyperparams(map[string]any{"lr": 0.001, "model": "mlp"}); err != nil {
		t.Fatal(err)
	}
	if err := l.LogHyperparams(map[string]any{"batch_size": 64, "max_epochs": 2}); err != nil {
		t.Fatal(err)
	}
	if err := l.LogMetrics(10, map[string]float64{"train_loss": 0.5}); err != nil {
		t.Fatal(err)
	}
	if err := l.Finalize("success"); err != nil {
		t.Fatal(err)
	}
	got, hp := tensorBoardScalars(t, dir)
	if want := []string{"batch_size", "lr", "max_epochs", "model"}; !reflect.DeepEqual(hp, want) {
		t.Errorf("TensorBoard's hyperparameters %v, want %v", hp, want)
	}
	if want := []tbPoint{{10, 0.5}}; !reflect.DeepEqual(got["train_loss"], want) {
		t.Errorf("train_loss %v, want %v", got["train_loss"], want)
	}

	// Hyperparameters alone (a run that logged no metric) are written at
	// Finalize.
	dir2 := t.TempDir()
	l2, _ := callbacks.NewTensorBoardLogger(dir2, nil)
	if err := l2.LogHyperparams(map[string]any{"lr": 0.1}); err != nil {
		t.Fatal(err)
	}
	if err := l2.Finalize("success"); err != nil {
		t.Fatal(err)
	}
	if _, hp := tensorBoardScalars(t, dir2); !reflect.DeepEqual(hp, []string{"lr"}) {
		t.Errorf("hyperparameters without metrics: %v, want [lr]", hp)
	}
}
