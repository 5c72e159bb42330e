package trainer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"syscall"

	"github.com/fulgur-ml/fulgur/module"
)

// How checkpoint files meet the disk. A save writes a temporary file next to
// its target (".last.ckpt.tmp-123456"), syncs it and renames it over the
// target, so a crash or a full disk leaves the previous checkpoint whole.
// The writer holds an exclusive flock on the temporary file while it writes
// (on Windows, the open file itself, which no other process can remove): the
// lock dies with the process, which is how the next start tells a save that
// was interrupted (its temporary file can be locked, and is removed) from
// one that another job is making right now (left alone).

// tempCheckpoint matches the temporary files of saves: "."+name+".tmp-"+digits.
var tempCheckpoint = regexp.MustCompile(`^\..+\.tmp-[0-9]+$`)

// writeCheckpointFile writes path through a locked temporary file in its
// directory; on any error the temporary file is removed and path is
// untouched. c names the settings in its errors.
func writeCheckpointFile(c *Config, path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	defer func() {
		if err != nil {
			err = diskHint(c, err, dir, path)
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := lockTemp(f); err != nil {
		return fmt.Errorf("lock %s: %w", tmp, err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if renameOpen {
		// Renamed while still open (and locked): a cleaner that opens the
		// temporary name from here on finds nothing to remove.
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	} else {
		// Windows renames no file that is open without FILE_SHARE_DELETE,
		// as Go opens them.
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	if d, err := os.Open(dir); err == nil {
		// Makes the rename durable; file systems that cannot sync a
		// directory are left to their own guarantees.
		d.Sync()
		d.Close()
	}
	return nil
}

// diskHint adds what to do to the errors a full or read-only disk gives.
func diskHint(c *Config, err error, dir, path string) error {
	keep := ""
	if _, serr := os.Stat(path); serr == nil {
		keep = fmt.Sprintf("; %s is unchanged", filepath.Base(path))
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), diskFull(err):
		return fmt.Errorf("%w: the file system holding %s is full%s: free space there, or save checkpoints on a larger disk (%s, ModelCheckpoint's Dirpath)", err, dir, keep, c.field("DefaultRootDir"))
	case errors.Is(err, syscall.EROFS), errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w: %s is not writable%s: make it writable, or save checkpoints elsewhere (%s, ModelCheckpoint's Dirpath)", err, dir, keep, c.field("DefaultRootDir"))
	}
	return err
}

// removeStaleTemps removes the temporary files of interrupted saves in dirs
// (missing directories are skipped) and returns their paths. A file that
// another process still holds locked is a save in progress and stays.
func removeStaleTemps(dirs ...string) ([]string, error) {
	var removed []string
	var errs []error
	seen := map[string]bool{}
	for _, dir := range dirs {
		if dir == "" || seen[dir] {
			continue
		}
		seen[dir] = true
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range ents {
			if !e.Type().IsRegular() || !tempCheckpoint.MatchString(e.Name()) {
				continue
			}
			p := filepath.Join(dir, e.Name())
			ok, err := removeIfUnlocked(p)
			if err != nil {
				errs = append(errs, err)
			} else if ok {
				removed = append(removed, p)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// checkpointDirs are the directories where this run's earlier saves may
// have left temporary files: the run directory and its checkpoints, every
// run directory's checkpoints under the root, and the directory of the
// checkpoint it resumes from.
func (t *Trainer) checkpointDirs(logDir, resume string) []string {
	dirs := []string{logDir, filepath.Join(logDir, "checkpoints")}
	if t.cfg.DefaultRootDir != "" {
		runs, _ := filepath.Glob(filepath.Join(t.cfg.DefaultRootDir, DefaultLogName, "version_*", "checkpoints"))
		dirs = append(dirs, runs...)
	}
	if resume != "" && resume != CkptLast && resume != CkptBest {
		dirs = append(dirs, filepath.Dir(resume))
	}
	return dirs
}

// prepareRunDir runs at the start of Fit, on every rank, after the run
// directory is chosen. Rank 0 removes the temporary files of interrupted
// saves and, when this Fit writes into the run directory, proves it can
// write there; the ranks agree on the outcome, so that a run directory
// rank 0 cannot write stops every rank before the first step instead of
// at the first checkpoint, an epoch later.
func (t *Trainer) prepareRunDir(ctx context.Context, logDir, resume string) error {
	var probeErr error
	if t.strat.Info().GlobalZero {
		removed, err := removeStaleTemps(t.checkpointDirs(logDir, resume)...)
		for _, p := range removed {
			t.cfg.Log.Warn().Str("file", p).Msg("removed the temporary file of an interrupted checkpoint save")
		}
		if err != nil {
			t.cfg.Log.Warn().Err(err).Msg("temporary files of interrupted saves")
		}
		if _, err := os.Stat(logDir); err == nil || t.writesRunDir() {
			probeErr = probeWritable(&t.cfg, logDir)
		}
	}
	if t.strat.Info().WorldSize > 1 {
		v := []float64{0}
		if probeErr != nil {
			v[0] = 1
		}
		if err := t.strat.Reduce(context.WithoutCancel(ctx), v, []float64{1}, []module.Reduce{module.Max}); err != nil {
			return fmt.Errorf("agree on the run directory across ranks: %w", err)
		}
		if v[0] > 0 && probeErr == nil {
			return fmt.Errorf("rank 0 cannot write the run directory %s (rank 0's error says why): make it writable, or set %s to a directory rank 0 can write", logDir, t.cfg.eitherField("DefaultRootDir", "LogDir"))
		}
	}
	return probeErr
}

// probeWritable writes and removes a temporary file in dir the way a save
// does.
func probeWritable(c *Config, dir string) error {
	err := writeCheckpointFile(c, filepath.Join(dir, "fulgur-probe"), func(w io.Writer) error {
		_, err := w.Write([]byte("fulgur"))
		return err
	})
	if err == nil {
		err = os.Remove(filepath.Join(dir, "fulgur-probe"))
	}
	if err != nil {
		return fmt.Errorf("the run directory cannot be written, so no checkpoint or log could be saved: %w", err)
	}
	return nil
}
