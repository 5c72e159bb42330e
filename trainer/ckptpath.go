package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Checkpoint names that ResolveCheckpoint understands besides a path.
const (
	// CkptLast is the newest last.ckpt under the root directory.
	CkptLast = "last"
	// CkptBest is the best checkpoint recorded by ModelCheckpoint.
	CkptBest = "best"
)

// bestPather is a callback that knows the best checkpoint of the run
// (callbacks.ModelCheckpoint).
type bestPather interface {
	BestModelPath() string
}

// checkpointNamer is a callback that writes checkpoints named from a
// Filename template into dir ("": the run directory's checkpoints/) and
// deletes the ones it no longer keeps: two with the same dir and template
// delete each other's files.
type checkpointNamer interface {
	CheckpointNames() (dir, filename string)
}

// validationSaver is a callback that saves a checkpoint when validation
// ends, a mid-epoch one (ValCheckInterval) included: Config.Validate
// refuses a ValCheckInterval that puts one inside an accumulation window.
type validationSaver interface {
	SavesOnValidation() bool
}

// ResolveCheckpoint turns which into a checkpoint file, the way
// FromCheckpoint and WithCheckpoint do (as Lightning's ckpt_path):
//
//   - "last": the newest last.ckpt (last-v1.ckpt, ..., or interrupted.ckpt
//     of a run stopped by a signal) anywhere under root,
//     that is in root/checkpoints and in every root/lightning_logs/version_N/checkpoints:
//     the one written last, by the save time each checkpoint records (a
//     copy without timestamps, such as cp -r, does not change the pick),
//     then by modification time (Lightning's order), then by global step;
//   - "best": the best_model_path that ModelCheckpoint recorded in the
//     newest checkpoint under root that records one;
//   - anything else: a path to a checkpoint file, which must exist.
//
// When nothing matches, the error lists the checkpoints that exist under
// root. A Trainer after Fit resolves "best" from its own ModelCheckpoint
// first.
func ResolveCheckpoint(root, which string) (string, error) {
	return resolveCheckpoint(root, which, "")
}

func resolveCheckpoint(root, which, best string) (string, error) {
	switch which {
	case "":
		return "", errors.New("the checkpoint is \"\": pass \"last\", \"best\" or a checkpoint file")
	case CkptLast, CkptBest:
	default:
		fi, err := os.Stat(which)
		if err != nil {
			return "", fmt.Errorf("checkpoint %q: %w: pass a checkpoint file, or \"last\" or \"best\" for one under the root directory %s", which, unwrapPath(err), root)
		}
		if fi.IsDir() {
			return "", fmt.Errorf("checkpoint %q is a directory: pass a checkpoint file, such as %s, or \"last\" or \"best\" for one under the root directory %s", which, filepath.Join(which, "checkpoints", "last.ckpt"), root)
		}
		return which, nil
	}
	if which == CkptBest && best != "" {
		if _, err := os.Stat(best); err != nil {
			return "", fmt.Errorf("checkpoint \"best\": ModelCheckpoint's best model %s: %w", best, unwrapPath(err))
		}
		return best, nil
	}
	infos, skipped, err := listCheckpoints(root)
	if err != nil {
		return "", err
	}
	var pick *CheckpointInfo
	for i := range infos {
		in := &infos[i]
		if which == CkptLast && !isLastName(filepath.Base(in.Path)) {
			continue
		}
		if which == CkptBest && in.BestModelPath == "" {
			continue
		}
		if pick == nil || newerCheckpoint(*in, *pick) {
			pick = in
		}
	}
	if pick == nil {
		what := "no last.ckpt"
		if which == CkptBest {
			what = "no checkpoint that records a best model (add a callbacks.ModelCheckpoint)"
		}
		return "", fmt.Errorf("checkpoint %q: %s under %s; %s", which, what, root, existing(infos, skipped))
	}
	if which == CkptLast {
		return pick.Path, nil
	}
	if _, err := os.Stat(pick.BestModelPath); err != nil {
		return "", fmt.Errorf("checkpoint \"best\": %s records the best model %s: %w", pick.Path, pick.BestModelPath, unwrapPath(err))
	}
	return pick.BestModelPath, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// isLastName reports whether a file is a "last" checkpoint (last.ckpt, or
// last-v1.ckpt when ModelCheckpoint kept an older one).
func isLastName(name string) bool {
	if name == path.Base(InterruptCheckpointName) {
		// A run stopped by a signal or a cancelled context saved it after
		// its last step: the newest place to resume from.
		return true
	}
	return name == "last.ckpt" || (strings.HasPrefix(name, "last-") && strings.HasSuffix(name, ".ckpt"))
}

// listCheckpoints reads the header of every *.ckpt under root.
func listCheckpoints(root string) ([]CheckpointInfo, []string, error) {
	if _, err := os.Stat(root); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("look for checkpoints under the root directory %s: it does not exist: train first, or pass a checkpoint file (or the root directory of a run that saved one)", root)
		}
		return nil, nil, fmt.Errorf("look for checkpoints under the root directory %s: %w", root, unwrapPath(err))
	}
	var infos []CheckpointInfo
	var skipped []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".ckpt") || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		info, err := ReadCheckpointInfo(p)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s (%v)", p, err))
			return nil
		}
		infos = append(infos, info)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("look for checkpoints under %s: %w", root, err)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Path < infos[j].Path })
	return infos, skipped, nil
}

// existing lists what a failed lookup found, so the user can pick a file.
func existing(infos []CheckpointInfo, skipped []string) string {
	if len(infos) == 0 && len(skipped) == 0 {
		return "there is no checkpoint (*.ckpt) there: train first, or pass a checkpoint file"
	}
	var b strings.Builder
	b.WriteString("checkpoints there:")
	const most = 20
	for i, in := range infos {
		if i == most {
			fmt.Fprintf(&b, " ... and %d more", len(infos)-most)
			break
		}
		fmt.Fprintf(&b, " %s (step %d)", in.Path, in.GlobalStep)
		if i < len(infos)-1 {
			b.WriteString(",")
		}
	}
	if len(skipped) > 0 {
		b.WriteString("; unreadable: " + strings.Join(skipped, "; "))
	}
	return b.String() + ": pass one of them as a path"
}

// bestRecorded finds the best_model_path in a checkpoint's callback states
// (the JSON map from callback name to its state dict).
func bestRecorded(meta string) string {
	var cbs map[string][]byte
	if json.Unmarshal([]byte(meta), &cbs) != nil {
		return ""
	}
	names := make([]string, 0, len(cbs))
	for n := range cbs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var st struct {
			Best string `json:"best_model_path"`
		}
		if json.Unmarshal(cbs[n], &st) == nil && st.Best != "" {
			return st.Best
		}
	}
	return ""
}

// checkpointPath resolves which for this Trainer: "best" asks its
// ModelCheckpoint first, then its default checkpoints, then the
// checkpoints under DefaultRootDir.
func (t *Trainer) checkpointPath(which string) (string, error) {
	best := ""
	if which == CkptBest {
		for _, cb := range t.cfg.Callbacks {
			if bp, ok := cb.(bestPather); ok && bp.BestModelPath() != "" {
				best = bp.BestModelPath()
				break
			}
		}
		if best == "" {
			// As Lightning's default ModelCheckpoint (no monitor): the
			// best is the newest epoch checkpoint this Trainer's Fit kept.
			best = t.lastEpochCkpt
		}
	}
	return resolveCheckpoint(t.cfg.DefaultRootDir, which, best)
}
