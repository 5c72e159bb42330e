package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

// DefaultLogName is the directory under the root that runs' version
// directories go in, as in Lightning.
const DefaultLogName = "lightning_logs"

// VersionDir returns root/name/version_N for the first N above every
// existing version_M directory (N = 0 for a new root). It creates nothing.
// name "" means DefaultLogName. In a rank that ddp started itself, it is
// the directory rank 0 chose under root/name (which rank 0 has made by
// then, for rank_N.log): every rank of the program names the same one.
// In a rank of an elastic job (FULGUR_MAX_RESTARTS, fulgur run) whose
// first attempt has recorded its run directory under root/name
// (ElasticRunDir), it is that directory: a restarted attempt goes on in
// the job's run, as its Fit does, rather than in the next version_N.
func VersionDir(root, name string) (string, error) {
	base, n, err := nextVersion(root, name)
	if err != nil {
		return "", err
	}
	for _, d := range []string{strategy.LaunchedRunDir(), ElasticRunDir()} {
		if d != "" && filepath.Clean(filepath.Dir(d)) == filepath.Clean(base) {
			return d, nil
		}
	}
	return filepath.Join(base, fmt.Sprintf("version_%d", n)), nil
}

func nextVersion(root, name string) (string, int, error) {
	if root == "" {
		return "", 0, errors.New("VersionDir: root is empty: pass the run's root directory, such as \".\"")
	}
	if name == "" {
		name = DefaultLogName
	}
	base := filepath.Join(root, name)
	ents, err := os.ReadDir(base)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", 0, fmt.Errorf("VersionDir: %w", err)
	}
	next := 0
	for _, e := range ents {
		v, ok := strings.CutPrefix(e.Name(), "version_")
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.Atoi(v); err == nil && n >= next {
			next = n + 1
		}
	}
	return base, next, nil
}

// chooseLogDir picks this Fit's run directory: Config.LogDir when the user
// named one, otherwise a new DefaultRootDir/lightning_logs/version_N that
// rank 0 picks. Every rank takes rank 0's choice (one small all-reduce, and
// one more for the bytes of a named LogDir): a program that computes its
// LogDir with VersionDir runs again on each self-launched rank, which sees
// rank 0's directory already made and computes the next one, so its shards
// of a sharded checkpoint would miss rank 0's index. Rank 0 creates the
// directory, so that the next run takes the next version.
func (t *Trainer) chooseLogDir(ctx context.Context) (string, error) {
	named := t.cfg.LogDir
	base, n := "", 0
	if named == "" || t.strat.Info().WorldSize > 1 {
		var err error
		if base, n, err = nextVersion(t.cfg.DefaultRootDir, ""); err != nil && named == "" {
			return "", fmt.Errorf("choose the run directory: %w", err)
		}
	}
	if t.launchDir != "" {
		// The first Fit takes the directory chosen before the strategy
		// started its ranks (it may hold their rank_N.log already).
		if v, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(t.launchDir), "version_")); err == nil {
			base, n = filepath.Dir(t.launchDir), v
		}
		t.launchDir = ""
	}
	if t.strat.Info().WorldSize > 1 {
		zero, err := t.rank0Dir(ctx, n, named)
		if err != nil {
			return "", fmt.Errorf("agree on the run directory across ranks: %w", err)
		}
		t.rank0Host = ""
		if own := cluster.HostID(); zero.host != "" && zero.host != own {
			t.rank0Host = cluster.HostName(zero.host)
			if t.rank0Host == cluster.HostName(own) {
				t.rank0Host += " (another machine, container or network namespace than this rank's, of the same name)"
			}
		}
		if zero.named != "" && named != "" && filepath.Clean(zero.named) != filepath.Clean(named) {
			// Info, not a warning: it is what a program that computes its
			// LogDir with VersionDir (as the README shows) sees on every
			// self-launched rank, and rank 0's is the right one.
			t.cfg.Log.Info().Str("log_dir", named).Str("rank0_log_dir", zero.named).Int("rank", t.strat.Info().Rank).
				Msg(t.cfg.field("LogDir") + " differs from rank 0's: this rank writes into rank 0's (with VersionDir each self-launched rank computes its own)")
		}
		if named = zero.named; named == "" {
			n = zero.version
		}
	}
	if named != "" {
		return named, nil
	}
	dir := filepath.Join(base, fmt.Sprintf("version_%d", n))
	if t.strat.Info().GlobalZero && t.writesRunDir() {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			t.madeRunDir = dir
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("create the run directory: %w", err)
		}
	}
	return dir, nil
}

// writesRunDir reports whether this Fit writes anything of its own into
// the run directory (the default checkpoints or the default logger).
func (t *Trainer) writesRunDir() bool {
	return t.defaultCheckpoints() || t.defaultLogger()
}

// defaultCheckpoints: as Lightning's enable_checkpointing, the built-in
// checkpoints are written unless turned off or a ModelCheckpoint (any
// callback that records a best model) takes their place.
func (t *Trainer) defaultCheckpoints() bool {
	if t.cfg.DisableCheckpointing || t.cfg.FastDevRun > 0 {
		return false
	}
	for _, cb := range t.cfg.Callbacks {
		if _, ok := cb.(bestPather); ok {
			return false
		}
	}
	return true
}

// defaultLogger: a CSVLogger in the run directory unless turned off or
// the user gave loggers.
func (t *Trainer) defaultLogger() bool {
	return !t.cfg.DisableLogger && len(t.cfg.Loggers) == 0
}

// saveEpochCheckpoint writes the built-in checkpoints at the end of an
// epoch: LogDir/checkpoints/epoch=E-step=S.ckpt (the previous one is
// removed, as Lightning's default ModelCheckpoint keeps the newest) and
// LogDir/checkpoints/last.ckpt. Every rank calls it; rank 0 writes.
func (t *Trainer) saveEpochCheckpoint(ctx context.Context, epoch int) error {
	dir := filepath.Join(t.state.LogDir, "checkpoints")
	p := filepath.Join(dir, fmt.Sprintf("epoch=%d-step=%d.ckpt", epoch, t.state.GlobalStep))
	// Both files record p as the epoch checkpoint kept, which a run resumed
	// from either in this directory replaces with its next one.
	prev := t.lastEpochCkpt
	t.lastEpochCkpt = p
	if err := t.saveCheckpoint(ctx, p); err != nil {
		t.lastEpochCkpt = prev
		return fmt.Errorf("default checkpoint: %w", err)
	}
	if err := t.saveCheckpoint(ctx, filepath.Join(dir, "last.ckpt")); err != nil {
		return fmt.Errorf("default checkpoint: %w", err)
	}
	if t.state.IsGlobalZero && prev != "" && prev != p {
		if err := RemoveCheckpoint(prev); err != nil {
			return fmt.Errorf("default checkpoint: remove the previous epoch's: %w", err)
		}
	}
	return nil
}

// sameDir reports whether two directory names are the same directory,
// relative or absolute.
func sameDir(a, b string) bool {
	if aa, err := filepath.Abs(a); err == nil {
		a = aa
	}
	if bb, err := filepath.Abs(b); err == nil {
		b = bb
	}
	return a == b
}

// removeIfEmpty removes the run directory a failed Fit created, when it
// wrote nothing there (a shape error in the first step, say), so the
// failure leaves no empty version_N behind. A directory holding anything
// stays.
func removeIfEmpty(dir string) {
	_ = os.Remove(dir) // fails, and so keeps it, unless it is empty
}

// rank0Choice is rank 0's run directory: its Config.LogDir, or the version
// it picked under the root.
type rank0Choice struct {
	named   string
	version int
	host    string // rank 0's cluster.HostID
}

// maxLogDirBytes bounds the Config.LogDir that rank 0 sends the others.
const maxLogDirBytes = 4096

// rank0Dir gives every rank rank 0's choice of run directory: the version
// number and the length of its named LogDir in one all-reduce (a max over
// -1 from the other ranks), then the name's bytes in a second when there
// is one. Every rank issues the same collectives whatever its own Config.
func (t *Trainer) rank0Dir(ctx context.Context, version int, named string) (rank0Choice, error) {
	ctx = context.WithoutCancel(ctx)
	zero := t.strat.Info().GlobalZero
	if zero && len(named) > maxLogDirBytes {
		named = "" // too long to send: the ranks use the version number
	}
	// Rank 0's host too, so that a rank elsewhere can say where rank 0's
	// files are (InterruptedError.SavedOn).
	host := cluster.HostID()
	if len(host) > maxLogDirBytes {
		host = host[:maxLogDirBytes]
	}
	hdr := []float64{-1, -1, -1}
	if zero {
		hdr[0], hdr[1], hdr[2] = float64(version), float64(len(named)), float64(len(host))
	}
	if err := t.strat.Reduce(ctx, hdr, []float64{1, 1, 1}, []module.Reduce{module.Max, module.Max, module.Max}); err != nil {
		return rank0Choice{}, err
	}
	c := rank0Choice{version: int(hdr[0])}
	ln, lh := max(int(hdr[1]), 0), max(int(hdr[2]), 0)
	if l := ln + lh; l > 0 {
		b := make([]float64, l)
		ops := make([]module.Reduce, l)
		for i := range ops {
			ops[i] = module.Sum
		}
		if zero {
			for i, ch := range []byte(named + host) {
				b[i] = float64(ch)
			}
		}
		if err := t.strat.Reduce(ctx, b, make([]float64, l), ops); err != nil {
			return rank0Choice{}, err
		}
		text := make([]byte, l)
		for i, v := range b {
			text[i] = byte(v)
		}
		c.named, c.host = string(text[:ln]), string(text[ln:])
	}
	return c, nil
}
