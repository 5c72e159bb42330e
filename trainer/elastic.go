package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Variables an elastic launcher sets for every rank (strategy/launch:
// EnvRestartCount, EnvElasticDir; `fulgur run` and ddp's self-launch with
// FULGUR_MAX_RESTARTS).
const (
	envRestartCount = "FULGUR_RESTART_COUNT"
	envElasticDir   = "FULGUR_ELASTIC_DIR"
)

// elasticRunDir is the file, in the launcher's directory, where rank 0
// records the run directory of the job (or the launcher did, before the
// first attempt): strategy/launch's ElasticRunDirFile, which the trainer
// does not import (its layer; TestElasticNamesMatchTheLauncher).
const elasticRunDir = "run_dir"

// elasticRun makes an elastic job one run, however often its ranks are
// restarted: the first Fit of the job records its run directory with the
// launcher; a restarted one (FULGUR_RESTART_COUNT ≥ 1) takes that directory
// again, so metrics.csv, hparams.yaml and the checkpoints go on in one
// version_N, and, when Fit was given no checkpoint, resumes from that
// run's newest last.ckpt (or interrupted.ckpt). The checkpoint carries the
// global step, the optimizer and learning-rate scheduler states and the
// position in the epoch, so the schedule goes on from the same step at any
// world size. It does nothing outside an elastic job.
func (t *Trainer) elasticRun(ctx context.Context, ckptPath *string) error {
	dir := os.Getenv(envElasticDir)
	if dir == "" || t.fitted {
		return nil
	}
	restart, _ := strconv.Atoi(os.Getenv(envRestartCount))
	rec := filepath.Join(dir, elasticRunDir)
	b, err := os.ReadFile(rec)
	if errors.Is(err, os.ErrNotExist) {
		// The first attempt (or one before it failed before Fit): choose
		// the run directory now and record it.
		runDir, err := t.chooseLogDir(ctx)
		if err != nil {
			return err
		}
		if t.strat.Info().GlobalZero {
			tmp := rec + ".tmp"
			if err := os.WriteFile(tmp, []byte(runDir), 0o644); err != nil {
				return fmt.Errorf("elastic job: record the run directory: %w", err)
			}
			if err := os.Rename(tmp, rec); err != nil {
				return fmt.Errorf("elastic job: record the run directory: %w", err)
			}
		}
		t.launchDir = runDir
		if restart > 0 {
			t.cfg.Log.Warn().Int("restart", restart).Str("run_dir", runDir).Msg("elastic restart: the earlier attempts stopped before training: starting from scratch")
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("elastic job: read the run directory the first attempt recorded: %w", err)
	}
	runDir := string(b)
	t.launchDir = runDir
	if restart == 0 {
		// The first attempt: rank 0 recorded the directory before this
		// rank reached Fit; there is nothing to resume yet.
		return nil
	}
	if t.cfg.LogDir != "" && filepath.Clean(t.cfg.LogDir) != filepath.Clean(runDir) {
		t.cfg.Log.Warn().Str("log_dir", t.cfg.LogDir).Str("run_dir", runDir).Msg("elastic restart: " + t.cfg.field("LogDir") + " is not the directory the job's first attempt ran in, so this attempt logs apart from it (it still resumes from its checkpoint): leave " + t.cfg.name("LogDir") + " empty, or set it from trainer.VersionDir (or trainer.ElasticRunDir())")
	}
	if *ckptPath != "" {
		return nil // the program names the checkpoint itself
	}
	p, err := ResolveCheckpoint(runDir, CkptLast)
	if err != nil {
		if t.strat.Info().GlobalZero {
			t.cfg.Log.Warn().Int("restart", restart).Str("run_dir", runDir).Err(err).Msg("elastic restart: no checkpoint in the run directory: training from scratch")
		}
		return nil
	}
	*ckptPath = p
	if t.strat.Info().GlobalZero { // the same on every rank: one line for the job
		t.cfg.Log.Warn().Int("restart", restart).Str("run_dir", runDir).Str("checkpoint", p).Int("world_size", t.strat.Info().WorldSize).Msg("elastic restart: resuming from the run's newest checkpoint")
	}
	return nil
}

// ElasticRunDir is the run directory of the elastic job this process is a
// rank of, once its first attempt has recorded it (at the start of its
// Fit); "" otherwise. A program that picks the run directory before Fit
// (to write into it early) and sets Config.LogDir takes this one when it
// is not "", so that a restarted job goes on in the same directory.
func ElasticRunDir() string {
	dir := os.Getenv(envElasticDir)
	if dir == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, elasticRunDir))
	if err != nil {
		return ""
	}
	return string(b)
}
