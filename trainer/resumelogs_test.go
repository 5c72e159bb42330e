package trainer_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// TestResumeLogsEachRowOnce: a run resumed in its run directory from any
// of its checkpoints, after the interrupted run had logged everything to
// the end, leaves metrics.csv and metrics.jsonl as an uninterrupted run
// writes them: the rows logged after the checkpoint are dropped, and those
// before it kept, also at the checkpoint's own step (a checkpoint at an
// epoch's last step comes before the epoch's end logs its epoch metrics and
// validation at that step, which the resumed run logs again).
func TestResumeLogsEachRowOnce(t *testing.T) {
	cases := []struct {
		name     string
		valEvery int
		when     map[string]func(*trainer.State) bool
	}{
		{"epoch ends", 0, map[string]func(*trainer.State) bool{
			"batch": func(s *trainer.State) bool { return s.GlobalStep == 16 || s.GlobalStep == 20 },
			"val":   func(s *trainer.State) bool { return s.Epoch == 0 },
			"epoch": func(s *trainer.State) bool { return s.Epoch == 0 },
		}},
		{"mid-epoch validation", 5, map[string]func(*trainer.State) bool{
			"batch": func(s *trainer.State) bool { return s.GlobalStep == 5 || s.GlobalStep == 16 },
			"val":   func(s *trainer.State) bool { return s.GlobalStep == 5 || s.GlobalStep == 16 },
		}},
	}
	files := []string{"metrics.csv", "metrics.jsonl"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := newResumeJob(t, 1, tc.valEvery)
			job.cfg.MaxEpochs = 2
			run := func(dir, ckpt string, cbs ...trainer.Callback) {
				t.Helper()
				csv, err := trainer.NewCSVLogger(dir)
				if err != nil {
					t.Fatal(err)
				}
				jl, err := callbacks.NewJSONLLogger(dir)
				if err != nil {
					t.Fatal(err)
				}
				j := job
				j.cfg.LogDir, j.cfg.Loggers = dir, []trainer.Logger{csv, jl}
				j.run(t, ckpt, cbs...)
			}
			ref := t.TempDir()
			sv := &saver{dir: t.TempDir(), when: tc.when}
			run(ref, "", sv)
			if len(sv.paths) < 3 {
				t.Fatalf("only %d checkpoints: %v", len(sv.paths), sv.paths)
			}
			want := map[string]string{}
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(ref, f))
				if err != nil {
					t.Fatal(err)
				}
				want[f] = string(b)
			}
			for _, p := range sv.paths {
				// The interrupted run logged everything to the end.
				dir := t.TempDir()
				for _, f := range files {
					if err := os.WriteFile(filepath.Join(dir, f), []byte(want[f]), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				run(dir, p)
				for _, f := range files {
					b, err := os.ReadFile(filepath.Join(dir, f))
					if err != nil {
						t.Fatal(err)
					}
					if string(b) != want[f] {
						t.Errorf("resumed from %s: %s is\n%s\nwant, as an uninterrupted run's,\n%s", filepath.Base(p), f, b, want[f])
					}
				}
			}
		})
	}
}
