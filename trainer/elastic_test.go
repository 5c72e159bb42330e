package trainer_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/strategy/ddp"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/launch"
	"github.com/fulgur-ml/fulgur/trainer"
)

// firstBatch records the first training batch a Fit runs.
type firstBatch struct{ idx int }

func (f *firstBatch) Name() string { return "firstBatch" }
func (f *firstBatch) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if f.idx < 0 {
		f.idx = s.BatchIdx
	}
	return nil
}

// TestResumeAtSmallerWorldKeepsSampleOffset: a checkpoint written by 3
// ranks mid-epoch resumes on 2 ranks at the global sample offset, rounded
// down to whole 2-rank batches (and whole accumulation windows).
func TestResumeAtSmallerWorldKeepsSampleOffset(t *testing.T) {
	for _, c := range []struct {
		name                  string
		rows, accum, saveStep int
		wantFirst, wantSteps  int
	}{
		// 500 rows at batch 32: 6 batches a rank on 3 ranks, 8 on 2. After
		// 3 batches on 3 ranks (9 of the epoch's order), 2 ranks go on at
		// their batch 4 (8 batches), not 3 (6: 3 trained twice).
		{"steps", 500, 1, 3, 4, 3 + 4},
		// 1000 rows: 11 batches a rank on 3 ranks, 16 on 2; windows of 2.
		// After 3 steps (6 batches a rank, 18 in all), 2 ranks go on at 9
		// rounded down to the window: 8; 4 windows remain.
		{"accumulation", 1000, 2, 3, 8, 3 + 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			job := newResumeJob(t, c.accum, 0)
			job.train = loader(t, regression(t, c.rows, 0.1, 9), 32, true, false)
			job.cfg.MaxEpochs = 1
			job.val = nil
			ddp := func(r int, g collective.Collective) strategy.Strategy {
				s, err := ddp.NewDDP(ddp.DDPConfig{Group: g})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			dir := t.TempDir()
			savers := make([]*saver, 3)
			fitRanks(t, 3, ddp, job, "", func(r int) []trainer.Callback {
				savers[r] = &saver{dir: dir, when: map[string]func(*trainer.State) bool{"batch": func(s *trainer.State) bool { return s.GlobalStep == c.saveStep }}}
				return []trainer.Callback{savers[r]}
			})
			if len(savers[0].paths) != 1 {
				t.Fatalf("saved %v", savers[0].paths)
			}
			first := &firstBatch{idx: -1}
			got := fitRanks(t, 2, ddp, job, savers[0].paths[0], func(r int) []trainer.Callback {
				if r == 0 {
					return []trainer.Callback{first}
				}
				return nil
			})
			if first.idx != c.wantFirst {
				t.Errorf("resumed on 2 ranks at batch %d, want %d", first.idx, c.wantFirst)
			}
			if s := got[0].Stats().GlobalStep; s != c.wantSteps {
				t.Errorf("the epoch ended at global step %d, want %d", s, c.wantSteps)
			}
		})
	}
}

// crashAt fails Fit at a step, as a rank dying there would end an attempt.
type crashAt struct{ step int }

func (c crashAt) Name() string { return "crashAt" }
func (c crashAt) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.GlobalStep == c.step {
		return errors.New("crash")
	}
	return nil
}

// TestElasticRestartContinuesTheRun: under an elastic launcher (its
// variables set by hand here), the first attempt records its run
// directory; a restarted Fit given no checkpoint resumes from that run's
// last.ckpt, in that directory, and ends with the weights of an
// uninterrupted run. A program that sets LogDir itself gets the directory
// from ElasticRunDir.
func TestElasticRestartContinuesTheRun(t *testing.T) {
	job := newResumeJob(t, 1, 0) // 16 batches an epoch, 3 epochs
	want := job.run(t, "").Store().SHA256()
	for _, setLogDir := range []bool{false, true} {
		root, state := t.TempDir(), t.TempDir()
		t.Setenv("FULGUR_ELASTIC_DIR", state)
		attempt := func(n int, cbs ...trainer.Callback) (*trainer.Trainer, error) {
			t.Setenv("FULGUR_RESTART_COUNT", string(rune('0'+n)))
			ckpt, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{LastOnly: true, EveryNTrainSteps: 5})
			if err != nil {
				t.Fatal(err)
			}
			cfg := job.cfg
			cfg.DefaultRootDir = root
			cfg = quiet(cfg)
			if setLogDir {
				if cfg.LogDir = trainer.ElasticRunDir(); cfg.LogDir == "" {
					cfg.LogDir = filepath.Join(root, "mine")
				}
			}
			cfg.Callbacks = append([]trainer.Callback{ckpt}, cbs...)
			tr, err := trainer.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return tr, tr.Fit(context.Background(), job.mod(), job.train, job.val)
		}
		if _, err := attempt(0, crashAt{23}); err == nil || !strings.Contains(err.Error(), "crash") {
			t.Fatalf("first attempt: %v, want the crash", err)
		}
		runDir := trainer.ElasticRunDir()
		tr, err := attempt(1)
		if err != nil {
			t.Fatalf("restart: %v", err)
		}
		if got := tr.Store().SHA256(); got != want {
			t.Errorf("LogDir set %v: the restarted run ended with weights %s, an uninterrupted one with %s", setLogDir, got, want)
		}
		dirs, _ := filepath.Glob(filepath.Join(root, "*", "*"))
		ckpts, _ := filepath.Glob(filepath.Join(runDir, "checkpoints", "last.ckpt"))
		if len(ckpts) != 1 {
			t.Errorf("LogDir set %v: %s holds no last.ckpt; the root holds %v", setLogDir, runDir, dirs)
		}
		// metrics.csv holds the first attempt's steps and the restart's,
		// each training step once: the steps the first attempt trained
		// past its checkpoint (21 to 23) were dropped when the restart
		// resumed from step 20 and trained them again.
		b, err := os.ReadFile(filepath.Join(runDir, "metrics.csv"))
		if err != nil {
			t.Fatalf("LogDir set %v: %v", setLogDir, err)
		}
		recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		steps := map[string]bool{}
		trainRows := map[string]int{}
		stepCol, lossCol := slices.Index(recs[0], "step"), slices.Index(recs[0], "train_loss_step")
		for _, r := range recs[1:] {
			steps[r[stepCol]] = true
			if lossCol >= 0 && r[lossCol] != "" {
				trainRows[r[stepCol]]++
			}
		}
		if len(trainRows) == 0 {
			t.Errorf("LogDir set %v: metrics.csv has no train_loss_step rows: %q", setLogDir, recs[0])
		}
		for s, n := range trainRows {
			if n != 1 {
				t.Errorf("LogDir set %v: metrics.csv has %d train_loss_step rows for step %s, want 1", setLogDir, n, s)
			}
		}
		for _, s := range []string{"1", "22", "48"} {
			if !steps[s] {
				t.Errorf("LogDir set %v: %s/metrics.csv has no row for step %s", setLogDir, runDir, s)
			}
		}
		if vs, _ := filepath.Glob(filepath.Join(root, "lightning_logs", "version_*")); !setLogDir && len(vs) != 1 {
			t.Errorf("run directories %v, want one", vs)
		}
	}
}

// TestElasticFirstAttemptDoesNotWarnOfARestart: on the first attempt of
// an elastic job, rank 0 records the run directory as soon as it reaches
// Fit; a rank that reaches Fit later finds that record. It is still the
// first attempt, with nothing to resume, so it must not log "elastic
// restart: no checkpoint in the run directory", which `fulgur run -nproc
// 2` printed on rank 1 of a fresh job whenever rank 0 was the quicker.
func TestElasticFirstAttemptDoesNotWarnOfARestart(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	root, state := t.TempDir(), t.TempDir()
	runDir := filepath.Join(root, "lightning_logs", "version_0") // rank 0 records it before creating it
	if err := os.WriteFile(filepath.Join(state, "run_dir"), []byte(runDir), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FULGUR_ELASTIC_DIR", state)
	t.Setenv("FULGUR_RESTART_COUNT", "0")
	cfg := job.cfg
	cfg.DefaultRootDir, cfg.MaxEpochs = root, 1
	cfg = quiet(cfg)
	var log bytes.Buffer
	cfg.Out = &log
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), job.mod(), job.train, job.val); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "elastic restart") {
		t.Errorf("the first attempt logged a restart:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(runDir, "checkpoints", "last.ckpt")); err != nil {
		t.Errorf("the first attempt did not train in the recorded run directory: %v", err)
	}
}

// The trainer reads what the elastic launcher writes, under the names
// strategy/launch gives them (the trainer keeps its own copies: it does not
// import the launcher).
func TestElasticNamesMatchTheLauncher(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(t.TempDir(), "lightning_logs", "version_4")
	if err := os.WriteFile(filepath.Join(dir, launch.ElasticRunDirFile), []byte(run), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(launch.EnvElasticDir, dir)
	t.Setenv(launch.EnvRestartCount, "1")
	if got := trainer.ElasticRunDir(); got != run {
		t.Errorf("ElasticRunDir() = %q with the launcher's %s/%s naming %s", got, launch.EnvElasticDir, launch.ElasticRunDirFile, run)
	}
}
