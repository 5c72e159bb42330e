package callbacks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/trainer"
)

// ModelCheckpointConfig configures a ModelCheckpoint. The zero value saves
// epoch=E-step=S.ckpt at the end of every epoch under the run directory's
// checkpoints/ (trainer.State.LogDir: a new lightning_logs/version_N per
// Fit), keeping the newest only. A ModelCheckpoint in the callbacks
// replaces the trainer's default checkpoints.
type ModelCheckpointConfig struct {
	// Dirpath is the directory of the checkpoints. "": <LogDir>/checkpoints,
	// the run directory's (trainer.State.LogDir).
	Dirpath string
	// Filename is the name template, without ".ckpt": "{epoch}", "{step}"
	// and "{METRIC}" or "{METRIC:FORMAT}" (a Go fmt verb without the "%",
	// such as ".4f"; for epoch and step an integer one, such as "03d")
	// are replaced by "name=value"; "/" in names becomes "_". "":
	// "{epoch}-{step}". Metrics print as %.4f unless formatted. A format
	// fmt cannot apply to the value is an error of Validate; a metric not
	// logged when a checkpoint is due is an error naming the logged ones
	// (Lightning writes 0). A name that a kept checkpoint (or last.ckpt)
	// has already, or a file on disk this callback does not keep (an
	// earlier run's in the same Dirpath, another ModelCheckpoint's), gets
	// "-v1", "-v2"... before ".ckpt", as in Lightning: such a file is never
	// overwritten nor deleted.
	Filename string
	// OmitMetricNames writes each field of Filename as its value alone,
	// not "name=value", as Lightning's auto_insert_metric_name=False:
	// "sample-epoch{epoch:02d}-loss{val/loss:.2f}" gives
	// "sample-epoch03-loss0.12".
	OmitMetricNames bool
	// Monitor is the metric that ranks checkpoints ("val_loss"). "": none;
	// the newest checkpoints are kept. "epoch" and "step", unless a metric
	// of that name is logged, rank by the epoch or global step, as in
	// Lightning: Monitor "step" with Mode "max" and SaveTopK k keeps the
	// newest k.
	Monitor string
	// Mode is "min" (the default: lower is better) or "max".
	Mode string
	// SaveTopK is how many checkpoints to keep: the best by Monitor, or the
	// newest without one. 0: 1; -1: all.
	SaveTopK int
	// LastOnly writes no ranked checkpoints, only last.ckpt (it implies
	// SaveLast).
	LastOnly bool
	// SaveLast also writes last.ckpt each time a checkpoint is due, at
	// the end of every epoch that saved none (as Lightning's save_last),
	// and where a Stop ends training in the middle of an epoch (not inside
	// an accumulation window), so that it holds the weights the run ended
	// with.
	SaveLast bool
	// EveryNTrainSteps saves after every this many optimizer steps instead
	// of at epoch ends. 0: off. With a Monitor that a validation logs
	// (val_loss), a step checkpoint has no score of its own: the weights
	// it holds were never validated. Each validation's end then saves and
	// ranks the checkpoint of the weights it measured, and the step
	// checkpoints between validations are recovery points: the newest is
	// kept, unranked, until a newer or a ranked one replaces it.
	// (Lightning ranks each step checkpoint by the last validation's
	// value, so the checkpoints after a validation tie on it, the one that
	// validation measured is not saved unless the step is a multiple of N,
	// and the best can be weights no validation saw.) With a Monitor that
	// training logs (train_loss), each step checkpoint is ranked by its
	// step's value, as in Lightning.
	EveryNTrainSteps int
	// TrainTimeInterval saves at the first training batch's end after
	// this much wall time since training started or the last such save,
	// as Lightning's train_time_interval (not inside an accumulation
	// window: at its end). The checkpoints are ranked as those of
	// EveryNTrainSteps. 0: off. Rank 0's clock decides for every rank.
	TrainTimeInterval time.Duration
	// Now is the clock of TrainTimeInterval. nil: time.Now.
	Now func() time.Time
	// EveryNEpochs saves at the end of every this many epochs (after
	// validation when the run validates, else at the training epoch's
	// end). 0: 1 (when EveryNTrainSteps and TrainTimeInterval are 0).
	EveryNEpochs int
	// Name keys the callback's state in checkpoints. "": "ModelCheckpoint".
	// Give each of several ModelCheckpoints its own.
	Name string
}

// Validate fills defaults and reports every problem at once.
func (c *ModelCheckpointConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Mode {
	case "":
		c.Mode = "min"
	case "min", "max":
	default:
		bad("ModelCheckpoint Mode is %q: use \"min\" or \"max\"", c.Mode)
	}
	if c.SaveTopK < -1 {
		bad("ModelCheckpoint SaveTopK is %d: use 0 (keep 1), a positive count, or -1 to keep all", c.SaveTopK)
	}
	if c.SaveTopK == 0 {
		c.SaveTopK = 1
	}
	if c.Monitor == "" && c.SaveTopK > 1 {
		bad("ModelCheckpoint SaveTopK is %d but Monitor is empty: ranking needs a metric; set Monitor (\"step\" with Mode \"max\" keeps the newest %d), or use 1 (the newest) or -1 (all)", c.SaveTopK, c.SaveTopK)
	}
	if c.EveryNTrainSteps < 0 || c.EveryNEpochs < 0 {
		bad("ModelCheckpoint EveryNTrainSteps %d and EveryNEpochs %d: use 0 or more", c.EveryNTrainSteps, c.EveryNEpochs)
	}
	if c.TrainTimeInterval < 0 {
		bad("ModelCheckpoint TrainTimeInterval is %v: use 0 (off) or a wall time between checkpoints, such as 30*time.Minute", c.TrainTimeInterval)
	}
	var set []string
	if c.EveryNTrainSteps > 0 {
		set = append(set, fmt.Sprintf("EveryNTrainSteps (%d)", c.EveryNTrainSteps))
	}
	if c.EveryNEpochs > 0 {
		set = append(set, fmt.Sprintf("EveryNEpochs (%d)", c.EveryNEpochs))
	}
	if c.TrainTimeInterval > 0 {
		set = append(set, fmt.Sprintf("TrainTimeInterval (%v)", c.TrainTimeInterval))
	}
	switch len(set) {
	case 2:
		bad("ModelCheckpoint %s and %s are both set: choose one, as in Lightning", set[0], set[1])
	case 3:
		bad("ModelCheckpoint %s, %s and %s are all set: choose one, as in Lightning", set[0], set[1], set[2])
	}
	if len(set) == 0 {
		c.EveryNEpochs = 1
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.LastOnly {
		c.SaveLast = true
	}
	if c.Filename == "" {
		c.Filename = "{epoch}-{step}"
	}
	// A "/" inside braces is part of a metric's name ("{val/loss}"), which
	// the file's name writes with "_"; outside them it would make a
	// subdirectory.
	if strings.Count(c.Filename, "{") != strings.Count(c.Filename, "}") || strings.ContainsAny(fieldRE.ReplaceAllString(c.Filename, ""), `/`+string(filepath.Separator)) {
		bad("ModelCheckpoint Filename %q: braces must pair up, as in \"{epoch}-{val_loss:.2f}\", and outside them it must not contain a path separator (use Dirpath)", c.Filename)
	}
	for _, m := range fieldRE.FindAllStringSubmatch(c.Filename, -1) {
		if name, spec := strings.TrimSpace(m[1]), m[2]; spec != "" {
			if _, err := formatField(name, spec, 1, 0.5); err != nil {
				bad("ModelCheckpoint Filename %q: %v", c.Filename, err)
			}
		}
	}
	if c.Name == "" {
		c.Name = "ModelCheckpoint"
	}
	return errors.Join(errs...)
}

// ModelCheckpoint saves checkpoints as training goes, keeping the best k by
// a monitored metric (or the newest), and optionally last.ckpt. Decisions
// are the same on every rank (validation metrics are reduced across ranks);
// rank 0 writes and deletes files. Files displaced from the top k (and
// recovery points a newer one replaced) are deleted at the callback's next
// call, once the new file is on disk, so a crash leaves an extra file
// rather than a missing one; an interrupted Fit (a signal, a cancelled
// context) deletes them once its interrupt checkpoint is saved.
//
// A Fit resumed from a checkpoint of another run directory (a new
// version_N) deletes nothing there, as Lightning's: neither that run's
// kept checkpoints nor the file it resumed from, and it ranks afresh in its
// own directory. Files that run displaced but could not delete, as it was
// killed or failed first, stay too; the resumed Fit names them in a
// warning. Resumed into the same directory (Config.LogDir), it takes over
// the ranking and deletes them.
type ModelCheckpoint struct {
	cfg        ModelCheckpointConfig
	dir        string
	st         ckptState
	warned     bool // about a monitored metric not logged yet
	warnedName bool // about a step checkpoint's name using such a metric
	// warnedForeign: about a file this callback does not keep having the
	// name of a new checkpoint.
	warnedForeign bool
	// batchStep is the global step at the latest training batch's end
	// (or at fit start), and inWindow reports that the latest batch took
	// no optimizer step: it is inside an accumulation window, whose
	// partial gradients no checkpoint holds.
	batchStep int
	inWindow  bool
	// lastTime is when training started or TrainTimeInterval last saved.
	lastTime time.Time
}

type ckptState struct {
	BestK map[string]jf `json:"best_k_models"`
	// Saved is the global step each of BestK was saved at: of checkpoints
	// scoring alike, the older is the best and the first displaced, as in
	// Lightning (whose best_k_models keeps insertion order). Absent from
	// the state of older checkpoints: their ties go by name.
	Saved     map[string]int `json:"best_k_steps,omitempty"`
	Best      string         `json:"best_model_path"`
	BestScore jf             `json:"best_model_score"`
	Last      string         `json:"last_model_path"`
	LastStep  int            `json:"last_global_step_saved"`
	Stale     []string       `json:"stale"` // to delete at the next call
	Monitor   string         `json:"monitor"`
	Mode      string         `json:"mode"`
	Dirpath   string         `json:"dirpath"`
	ValEpoch  int            `json:"last_validated_epoch"`
	// Recovery is the newest step checkpoint saved between validations
	// while monitoring a validation metric: kept, unranked, until a newer
	// one or a ranked one replaces it.
	Recovery string `json:"recovery_model_path,omitempty"`
}

var (
	_ trainer.FitStartHook      = (*ModelCheckpoint)(nil)
	_ trainer.ReadyChecker      = (*ModelCheckpoint)(nil)
	_ trainer.TrainStartHook    = (*ModelCheckpoint)(nil)
	_ trainer.TrainBatchEndHook = (*ModelCheckpoint)(nil)
	_ trainer.StepEndStopper    = (*ModelCheckpoint)(nil)
	_ trainer.ValidationEndHook = (*ModelCheckpoint)(nil)
	_ trainer.TrainEpochEndHook = (*ModelCheckpoint)(nil)
	_ trainer.TrainEndHook      = (*ModelCheckpoint)(nil)
	_ trainer.FitEndHook        = (*ModelCheckpoint)(nil)
	_ trainer.ExceptionHook     = (*ModelCheckpoint)(nil)
	_ trainer.Stateful          = (*ModelCheckpoint)(nil)
)

// NewModelCheckpoint validates cfg and returns the callback.
func NewModelCheckpoint(cfg ModelCheckpointConfig) (*ModelCheckpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &ModelCheckpoint{cfg: cfg, st: ckptState{BestK: map[string]jf{}, Saved: map[string]int{}, LastStep: -1, ValEpoch: -1, Monitor: cfg.Monitor, Mode: cfg.Mode}}, nil
}

func (c *ModelCheckpoint) Name() string { return c.cfg.Name }

// CheckReady refuses a ModelCheckpoint not made by NewModelCheckpoint
// (trainer.ReadyChecker).
func (c *ModelCheckpoint) CheckReady() error {
	if c.cfg.Name == "" { // Validate always names it
		return literal("NewModelCheckpoint", "has no Name to keep its state under in checkpoints, and its settings are unchecked")
	}
	return nil
}

// StopsAtStepEnd is false: it saves every N train steps, never stops
// (trainer.StepEndStopper).
func (c *ModelCheckpoint) StopsAtStepEnd() bool { return false }

// Config returns the validated configuration.
func (c *ModelCheckpoint) Config() ModelCheckpointConfig { return c.cfg }

// BestModelPath is the best checkpoint so far ("" before the first), by
// Monitor, or the newest without one.
func (c *ModelCheckpoint) BestModelPath() string { return c.st.Best }

// BestModelScore is the monitored value of BestModelPath (NaN if none).
func (c *ModelCheckpoint) BestModelScore() float64 {
	if c.st.Best == "" {
		return math.NaN()
	}
	return float64(c.st.BestScore)
}

// LastModelPath is the checkpoint written last: last.ckpt with SaveLast
// (Lightning's last_model_path), else the newest ranked one.
func (c *ModelCheckpoint) LastModelPath() string { return c.st.Last }

// KthBest is Lightning's kth_best_model_path and kth_value: the kept
// checkpoint a better one displaces next, the worst of the top k, and its
// score; "" and NaN until k are kept (with SaveTopK -1, the worst kept),
// or without a Monitor. A resumed run has it from the checkpoint, as
// BestK.
func (c *ModelCheckpoint) KthBest() (path string, score float64) {
	if c.cfg.Monitor == "" || len(c.st.BestK) == 0 || (c.cfg.SaveTopK != -1 && len(c.st.BestK) < c.cfg.SaveTopK) {
		return "", math.NaN()
	}
	w := c.worst()
	return w, float64(c.st.BestK[w])
}

// BestK returns the kept checkpoints and their scores.
func (c *ModelCheckpoint) BestK() map[string]float64 {
	out := make(map[string]float64, len(c.st.BestK))
	for k, v := range c.st.BestK {
		out[k] = float64(v)
	}
	return out
}

// SavesOnValidation reports whether it saves when validation ends, a
// mid-epoch validation included (trainer.Config.Validate then refuses a
// ValCheckInterval that is no multiple of AccumulateGradBatches): true
// unless it saves every N train steps, and then too with a Monitor (which
// may be a validation metric: see EveryNTrainSteps).
func (c *ModelCheckpoint) SavesOnValidation() bool {
	return !c.stepwise() || (c.cfg.Monitor != "" && !c.cfg.LastOnly)
}

// CheckpointNames returns the configured Dirpath ("": the run directory's
// checkpoints/) and Filename template: trainer.New refuses two checkpoint
// callbacks with the same, which would delete each other's files.
func (c *ModelCheckpoint) CheckpointNames() (dir, filename string) {
	return c.cfg.Dirpath, c.cfg.Filename
}

// Dir is where checkpoints go (known from fit start).
func (c *ModelCheckpoint) Dir() string { return c.dir }

// defaultDir is where checkpoints go without a Dirpath: the run
// directory's checkpoints/ (as Lightning's ModelCheckpoint uses the
// logger's version directory), or RootDir/checkpoints outside Fit.
func defaultDir(s *trainer.State) string {
	if s.LogDir != "" {
		return filepath.Join(s.LogDir, "checkpoints")
	}
	return filepath.Join(s.RootDir, "checkpoints")
}

func (c *ModelCheckpoint) OnFitStart(ctx context.Context, s *trainer.State) error {
	c.dir = c.cfg.Dirpath
	if c.dir == "" {
		c.dir = defaultDir(s)
	}
	// Names compared as written: the same directory named once relative
	// and once absolute only restarts the ranking, which deletes nothing.
	if c.st.Dirpath != "" && filepath.Clean(c.st.Dirpath) != filepath.Clean(c.dir) {
		// The ranking restored from a checkpoint (or kept from an earlier
		// Fit) is of files in another directory, such as the run directory
		// of the run this one resumes: they are that run's, so none of them
		// is displaced and deleted from here. As Lightning's, the ranking
		// starts afresh in the new directory, keeping only the best path
		// until a checkpoint is saved here.
		if len(c.st.BestK) > 0 {
			s.Warn(fmt.Sprintf("ModelCheckpoint: checkpoints go to %s, not %s as in the run this Fit continues: its %d ranked checkpoint(s) stay there, untouched, and the ranking starts afresh", c.dir, c.st.Dirpath, len(c.st.BestK)))
		}
		// Files that run displaced and meant to delete at its next call
		// are still there when it was killed (or failed) before that call:
		// they are its, not this Fit's, so they stay too, but the user is
		// told which they are.
		var left []string
		for _, p := range c.st.Stale {
			if _, kept := c.st.BestK[p]; kept || sameFile(p, s.ResumedFrom) || !s.IsGlobalZero {
				continue
			}
			if _, err := os.Stat(p); err == nil {
				left = append(left, p)
			}
		}
		if len(left) > 0 {
			s.Warn(fmt.Sprintf("ModelCheckpoint: the run this Fit continues displaced %s but ended before deleting it (killed, or failed): left alone, as that run's directory is not this Fit's; delete it yourself if you do not need it", strings.Join(left, ", ")))
		}
		c.st = ckptState{BestK: map[string]jf{}, Saved: map[string]int{}, Best: c.st.Best, BestScore: c.st.BestScore, LastStep: c.st.LastStep,
			Monitor: c.st.Monitor, Mode: c.st.Mode, ValEpoch: c.st.ValEpoch}
	}
	c.st.Dirpath = c.dir
	c.batchStep, c.inWindow = s.GlobalStep, false
	return c.removeStale(s)
}

// stepwise reports whether checkpoints are due at training batches'
// ends (EveryNTrainSteps, TrainTimeInterval) rather than at epochs'.
func (c *ModelCheckpoint) stepwise() bool {
	return c.cfg.EveryNTrainSteps > 0 || c.cfg.TrainTimeInterval > 0
}

// OnTrainStart starts TrainTimeInterval's clock, as Lightning's (the
// sanity check before it does not count).
func (c *ModelCheckpoint) OnTrainStart(ctx context.Context, s *trainer.State) error {
	c.lastTime = c.cfg.Now()
	return nil
}

// timeDue reports whether TrainTimeInterval has passed since the last
// time-based save, by rank 0's clock on every rank (their clocks differ,
// and they must save together).
func (c *ModelCheckpoint) timeDue(ctx context.Context, s *trainer.State) (bool, error) {
	if c.cfg.TrainTimeInterval <= 0 || c.inWindow || s.GlobalStep == c.st.LastStep {
		return false, nil
	}
	now, due := c.cfg.Now(), 0.0
	if now.Sub(c.lastTime) >= c.cfg.TrainTimeInterval {
		due = 1
	}
	due, err := s.Rank0Value(ctx, due)
	if err != nil {
		return false, fmt.Errorf("ModelCheckpoint(TrainTimeInterval %v): %w", c.cfg.TrainTimeInterval, err)
	}
	if due == 0 {
		return false, nil
	}
	c.lastTime = now
	return true, nil
}

func (c *ModelCheckpoint) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	c.inWindow, c.batchStep = s.GlobalStep == c.batchStep, s.GlobalStep
	n := c.cfg.EveryNTrainSteps
	due, err := c.timeDue(ctx, s)
	if err != nil {
		return err
	}
	if !due && (n == 0 || s.GlobalStep == 0 || s.GlobalStep%n != 0 || s.GlobalStep == c.st.LastStep) {
		return nil
	}
	if c.cfg.Monitor != "" && !c.cfg.LastOnly {
		_, ok, fromVal := c.monitored(s)
		if !ok && !c.warned {
			c.warned = true
			s.Warn(fmt.Sprintf("ModelCheckpoint(Monitor %q): the metric is not logged yet at step %d; until it is, the step checkpoints are kept unranked, the newest only", c.cfg.Monitor, s.GlobalStep))
		}
		if !ok || fromVal {
			return c.save(ctx, s, saveRecovery)
		}
	}
	return c.save(ctx, s, saveRanked)
}

// OnValidationEnd saves the epoch's checkpoint; when saving every N train
// steps while monitoring a validation metric, it ranks the checkpoint of
// the weights this validation measured.
func (c *ModelCheckpoint) OnValidationEnd(ctx context.Context, s *trainer.State) error {
	if s.Stage != "fit" || s.SanityChecking {
		// Trainer.Validate measures weights it does not train; the sanity
		// check measures the weights before any training step.
		return nil
	}
	c.st.ValEpoch = s.Epoch
	if c.stepwise() {
		if c.cfg.Monitor == "" || c.cfg.LastOnly || s.FastDevRun {
			return nil
		}
		if _, ok, fromVal := c.monitored(s); ok && !fromVal {
			return nil // a training metric: step checkpoints are ranked by it
		}
		return c.save(ctx, s, saveRanked)
	}
	if (s.Epoch+1)%c.cfg.EveryNEpochs != 0 || s.GlobalStep == c.st.LastStep {
		return nil
	}
	return c.save(ctx, s, saveRanked)
}

// monitored returns the value of Monitor and whether a validation logged
// it: a logged metric or, when none of that name is, the epoch or global
// step ("epoch", "step"), by which Lightning's ModelCheckpoint ranks too
// (Mode "max" keeps the newest k).
func (c *ModelCheckpoint) monitored(s *trainer.State) (v float64, ok, fromValidation bool) {
	if v, ok := s.Metrics.Get(c.cfg.Monitor); ok {
		return v, true, s.Metrics.FromValidation(c.cfg.Monitor)
	}
	switch c.cfg.Monitor {
	case "epoch":
		return float64(s.Epoch), true, false
	case "step":
		return float64(s.GlobalStep), true, false
	}
	return 0, false, false
}

// saveKind says how save treats the checkpoint due now.
type saveKind int

const (
	saveRanked   saveKind = iota // ranked (by Monitor, or newest)
	saveRecovery                 // kept unranked until a newer checkpoint
)

// OnTrainEpochEnd saves the epoch's checkpoint when the Fit does not
// validate; with validation it is saved at OnValidationEnd, in the epochs
// that validate only (as Lightning's, whatever CheckValEveryNEpoch): in the
// others a validation metric is missing or the last validation's.
//
// With SaveLast, an epoch that ends with no checkpoint due still refreshes
// last.ckpt, as Lightning's save_last does, so that it holds the weights
// the run ended with ("-ckpt-path last" then evaluates the trained weights
// and resumes where the run stopped, not at the last step checkpoint or
// the last epoch that EveryNEpochs selected).
//
// A Stop inside an accumulation window ends the epoch there (the trainer
// runs its end as Lightning's does), where no checkpoint can be saved: the
// newest one stays.
func (c *ModelCheckpoint) OnTrainEpochEnd(ctx context.Context, s *trainer.State) error {
	if c.inWindow {
		return c.removeStale(s)
	}
	if c.stepwise() || s.HasValidation || c.st.ValEpoch == s.Epoch || (s.Epoch+1)%c.cfg.EveryNEpochs != 0 || s.GlobalStep == c.st.LastStep {
		if err := c.removeStale(s); err != nil {
			return err
		}
		return c.saveLast(ctx, s)
	}
	return c.save(ctx, s, saveRanked)
}

// resolveDir sets the checkpoint directory if OnFitStart has not.
func (c *ModelCheckpoint) resolveDir(s *trainer.State) {
	if c.dir == "" {
		c.dir = c.cfg.Dirpath
		if c.dir == "" {
			c.dir = defaultDir(s)
		}
	}
}

// saveLast writes last.ckpt alone, unless this step was saved already.
func (c *ModelCheckpoint) saveLast(ctx context.Context, s *trainer.State) error {
	if !c.cfg.SaveLast || s.FastDevRun || s.GlobalStep == c.st.LastStep {
		return nil
	}
	c.resolveDir(s)
	c.st.LastStep = s.GlobalStep
	p := filepath.Join(c.dir, "last.ckpt")
	if err := s.SaveCheckpoint(ctx, p); err != nil {
		return err
	}
	c.st.Last = p
	return nil
}

// OnTrainEnd refreshes last.ckpt (SaveLast) when training ended where no
// checkpoint was saved (an epoch's end saves it, that of an epoch a Stop
// ends early too, as Lightning's Timer ends training and its checkpoint
// callback saves). Not inside an accumulation window, whose partial
// gradients a checkpoint cannot hold.
func (c *ModelCheckpoint) OnTrainEnd(ctx context.Context, s *trainer.State) error {
	if c.inWindow {
		return nil
	}
	return c.saveLast(ctx, s)
}

func (c *ModelCheckpoint) OnFitEnd(ctx context.Context, s *trainer.State) error {
	return c.removeStale(s)
}

// OnException deletes, when the Fit was interrupted (a signal or a
// cancelled context) and its interrupt checkpoint was saved, the files this
// callback displaced in this run and meant to delete at its next call,
// which will not come: a recovery point a newer one replaced, a checkpoint
// that fell out of the top k. The files that replaced them are on disk (the
// trainer writes a hook's checkpoints when the hook ends), and so is the
// interrupt checkpoint. After another failure nothing is deleted: a save
// may be what failed.
func (c *ModelCheckpoint) OnException(ctx context.Context, s *trainer.State, err error) error {
	var ie *trainer.InterruptedError
	if !errors.As(err, &ie) || ie.Checkpoint == "" {
		return nil
	}
	return c.removeStale(s)
}

// save decides which files a checkpoint due now goes to, updates the
// ranking, and asks the trainer to write them.
func (c *ModelCheckpoint) save(ctx context.Context, s *trainer.State, kind saveKind) error {
	if s.FastDevRun {
		return nil
	}
	if err := c.removeStale(s); err != nil {
		return err
	}
	c.resolveDir(s)
	c.st.LastStep = s.GlobalStep
	var paths []string
	switch {
	case c.cfg.LastOnly:
	case kind == saveRecovery:
		p, err := c.recovery(ctx, s)
		if err != nil {
			return err
		}
		if p != "" {
			paths = append(paths, p)
		}
	default:
		p, err := c.decide(ctx, s)
		if err != nil {
			return err
		}
		if p != "" {
			paths = append(paths, p)
			// The ranked checkpoint is as new as the recovery one, or
			// newer: it takes over as the point to resume from.
			if r := c.st.Recovery; r != "" {
				c.st.Recovery = ""
				if r != p {
					c.stale(r)
				}
			}
		}
	}
	if c.cfg.SaveLast {
		paths = append(paths, filepath.Join(c.dir, "last.ckpt"))
	}
	for _, p := range paths {
		if err := s.SaveCheckpoint(ctx, p); err != nil {
			return err
		}
		c.st.Last = p
	}
	return nil
}

// decide ranks the current checkpoint and returns its path, or "" when it
// does not make the top k. Displaced files are queued for deletion.
func (c *ModelCheckpoint) decide(ctx context.Context, s *trainer.State) (string, error) {
	name, err := formatFilename(ctx, c.cfg.Filename, !c.cfg.OmitMetricNames, s)
	if err != nil {
		return "", err
	}
	k := c.cfg.SaveTopK
	if c.cfg.Monitor == "" {
		reuse := ""
		if k == 1 {
			for old := range c.st.BestK {
				reuse = old
			}
		}
		path, err := c.freePath(ctx, s, name, reuse)
		if err != nil {
			return "", err
		}
		if k == 1 {
			for old := range c.st.BestK {
				if old != path {
					c.stale(old)
				}
			}
			clear(c.st.BestK)
			clear(c.st.Saved)
		}
		c.st.BestK[path], c.st.Saved[path] = jf(s.GlobalStep), s.GlobalStep
		c.st.Best, c.st.BestScore = path, jf(math.NaN())
		c.unstale(path)
		return path, nil
	}
	cur, ok, _ := c.monitored(s)
	if !ok {
		return "", fmt.Errorf("ModelCheckpoint(Monitor %q): the metric was not logged; logged metrics are %v%s: log it with Step.Log or fix Monitor%s", c.cfg.Monitor, s.Metrics.Names(), bareNames(s.Metrics), noValidation(s))
	}
	// Every rank ranks by rank 0's value: a step's loss differs between
	// ranks, and a checkpoint that some ranks keep and others do not is a
	// collective some ranks skip (fsdp's gather, a sharded checkpoint's
	// agreement) and shard files some ranks delete.
	if cur, err = s.Rank0Value(ctx, cur); err != nil {
		return "", fmt.Errorf("ModelCheckpoint(Monitor %q): %w", c.cfg.Monitor, err)
	}
	if math.IsNaN(cur) {
		cur = math.Inf(1)
		if c.cfg.Mode == "max" {
			cur = math.Inf(-1)
		}
	}
	displaced := ""
	if k != -1 && len(c.st.BestK) >= k {
		displaced = c.worst()
		if !c.better(cur, float64(c.st.BestK[displaced])) {
			return "", nil
		}
	}
	path, err := c.freePath(ctx, s, name, displaced)
	if err != nil {
		return "", err
	}
	c.st.BestK[path], c.st.Saved[path] = jf(cur), s.GlobalStep
	c.unstale(path)
	for k != -1 && len(c.st.BestK) > k {
		w := c.worst()
		delete(c.st.BestK, w)
		delete(c.st.Saved, w)
		c.stale(w)
	}
	best := ""
	for p, v := range c.st.BestK {
		if best == "" || c.better(float64(v), float64(c.st.BestK[best])) || (float64(v) == float64(c.st.BestK[best]) && c.older(p, best)) {
			best = p
		}
	}
	c.st.Best, c.st.BestScore = best, c.st.BestK[best]
	return path, nil
}

// freePath returns dir/name.ckpt or, when a checkpoint this callback keeps
// has that name already (a Filename without {epoch} or {step}, or with a
// metric that rounds to the same value), dir/name-vN.ckpt with the lowest
// free N, as Lightning's: a new checkpoint never replaces a kept one other
// than reuse, the one it displaces. last.ckpt counts as kept with SaveLast.
// A recovery checkpoint does not: the ranked one of the same weights or
// newer ones takes over from it. A file this callback does not keep that
// is on disk (rank 0's) counts as kept too, as in Lightning: an earlier
// run's in the same Dirpath, or another ModelCheckpoint's, which would
// otherwise be overwritten and later deleted as this callback's own.
func (c *ModelCheckpoint) freePath(ctx context.Context, s *trainer.State, name, reuse string) (string, error) {
	taken := func(p string) (bool, error) {
		if p == reuse || p == c.st.Recovery {
			return false, nil
		}
		if _, kept := c.st.BestK[p]; kept || (c.cfg.SaveLast && p == filepath.Join(c.dir, "last.ckpt")) {
			return true, nil
		}
		return c.foreign(ctx, s, p)
	}
	p := filepath.Join(c.dir, name+".ckpt")
	for v := 1; ; v++ {
		t, err := taken(p)
		if err != nil || !t {
			return p, err
		}
		p = filepath.Join(c.dir, fmt.Sprintf("%s-v%d.ckpt", name, v))
	}
}

// foreign reports whether a checkpoint file this callback does not keep
// is at p, as rank 0 sees it, or is to be written there at this hook's end
// (another callback asked for it), on every rank alike (they name the file
// together), and warns once when one is.
func (c *ModelCheckpoint) foreign(ctx context.Context, s *trainer.State, p string) (bool, error) {
	there := 0.0
	if s.SavePending(p) {
		there = 1 // another callback's, written once the hook ends
	} else if s.IsGlobalZero {
		if _, err := os.Stat(p); err == nil {
			there = 1
		}
	}
	there, err := s.Rank0Value(ctx, there)
	if err != nil {
		return false, fmt.Errorf("ModelCheckpoint: is %s taken: %w", p, err)
	}
	if there == 0 {
		return false, nil
	}
	if !c.warnedForeign {
		c.warnedForeign = true
		s.Warn(fmt.Sprintf("ModelCheckpoint: %s exists and is no checkpoint this callback keeps (an earlier run's in the same directory, or another callback's): it is left alone and the new checkpoint gets a -vN name beside it, as in Lightning", p))
	}
	return true, nil
}

// recovery returns the path of a step checkpoint saved between
// validations, and queues the previous such checkpoint for deletion. A
// name template using a metric not logged yet (before the first
// validation) saves none, with one warning.
func (c *ModelCheckpoint) recovery(ctx context.Context, s *trainer.State) (string, error) {
	name, err := formatFilename(ctx, c.cfg.Filename, !c.cfg.OmitMetricNames, s)
	if err != nil {
		if !c.warnedName {
			c.warnedName = true
			s.Warn(fmt.Sprintf("ModelCheckpoint: no step checkpoint at step %d: %v; step checkpoints are written once it is", s.GlobalStep, err))
		}
		return "", nil
	}
	path := filepath.Join(c.dir, name+".ckpt")
	if _, ranked := c.st.BestK[path]; ranked {
		// The template names a ranked checkpoint ("{epoch}" within an
		// epoch): its file holds the weights its score measured.
		return "", nil
	}
	if path, err = c.freePath(ctx, s, name, c.st.Recovery); err != nil {
		return "", err
	}
	if old := c.st.Recovery; old != "" && old != path {
		c.stale(old)
	}
	c.st.Recovery = path
	c.unstale(path)
	return path, nil
}

func (c *ModelCheckpoint) better(a, b float64) bool {
	if c.cfg.Mode == "max" {
		return a > b
	}
	return a < b
}

// worst is the kept checkpoint with the worst score (ties: the older, as
// Lightning's kth_best_model_path).
func (c *ModelCheckpoint) worst() string {
	w := ""
	for p, v := range c.st.BestK {
		if w == "" || c.better(float64(c.st.BestK[w]), float64(v)) || (float64(v) == float64(c.st.BestK[w]) && c.older(p, w)) {
			w = p
		}
	}
	return w
}

// older reports whether kept checkpoint a was saved before b (by name when
// a checkpoint's state does not say).
func (c *ModelCheckpoint) older(a, b string) bool {
	sa, okA := c.st.Saved[a]
	sb, okB := c.st.Saved[b]
	if okA && okB && sa != sb {
		return sa < sb
	}
	return a < b
}

func (c *ModelCheckpoint) stale(p string) {
	if p == c.st.Last && c.cfg.SaveLast {
		return
	}
	c.st.Stale = append(c.st.Stale, p)
}

func (c *ModelCheckpoint) unstale(p string) {
	out := c.st.Stale[:0]
	for _, q := range c.st.Stale {
		if q != p {
			out = append(out, q)
		}
	}
	c.st.Stale = out
}

// removeStale deletes displaced checkpoints (rank 0), but not the one the
// Fit resumed from, as Lightning's: it stays, unranked, for the user to
// resume from again.
func (c *ModelCheckpoint) removeStale(s *trainer.State) error {
	if len(c.st.Stale) == 0 {
		return nil
	}
	if s.IsGlobalZero {
		for _, p := range c.st.Stale {
			if _, kept := c.st.BestK[p]; kept || p == filepath.Join(c.dir, "last.ckpt") || sameFile(p, s.ResumedFrom) {
				continue
			}
			if err := trainer.RemoveCheckpoint(p); err != nil {
				return fmt.Errorf("remove displaced checkpoint: %w", err)
			}
		}
	}
	c.st.Stale = c.st.Stale[:0]
	return nil
}

// sameFile reports whether paths a and b name the same file, one relative
// and the other absolute included.
func sameFile(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

var fieldRE = regexp.MustCompile(`\{([^{}:]+)(?::([^{}]+))?\}`)

// formatFilename expands "{epoch}-{val_loss:.2f}" into
// "epoch=3-val_loss=0.12" (without names, "3-0.12"), with rank 0's value of each metric on every
// rank (a step's loss differs between ranks, and every rank must name the
// file alike: under fsdp or Config.ShardedCheckpoint each writes its shard
// beside that name).
func formatFilename(ctx context.Context, tmpl string, names bool, s *trainer.State) (string, error) {
	var err error
	out := fieldRE.ReplaceAllStringFunc(tmpl, func(m string) string {
		sub := fieldRE.FindStringSubmatch(m)
		name, spec := strings.TrimSpace(sub[1]), sub[2]
		var v string
		switch name {
		case "epoch", "step":
			n := s.Epoch
			if name == "step" {
				n = s.GlobalStep
			}
			v, _ = formatField(name, spec, n, 0) // spec checked by Validate
		default:
			x, ok := s.Metrics.Get(name)
			if !ok {
				if err == nil {
					err = fmt.Errorf("ModelCheckpoint Filename %q uses %q, which was not logged; logged metrics are %v%s", tmpl, name, s.Metrics.Names(), bareNames(s.Metrics))
				}
				return m
			}
			x, rerr := s.Rank0Value(ctx, x)
			if rerr != nil {
				if err == nil {
					err = fmt.Errorf("ModelCheckpoint Filename %q: %w", tmpl, rerr)
				}
				return m
			}
			v, _ = formatField(name, spec, 0, x)
		}
		if !names {
			return v
		}
		return strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(name) + "=" + v
	})
	return out, err
}

// formatField writes one field of a Filename: epoch and step (n) as
// integers, a metric (x) as %.4f, or with spec, a fmt verb without its
// "%" ("03d", ".2f"); an error for a spec fmt cannot apply to the value.
func formatField(name, spec string, n int, x float64) (string, error) {
	var v string
	switch {
	case (name == "epoch" || name == "step") && spec == "":
		return strconv.Itoa(n), nil
	case name == "epoch" || name == "step":
		v = fmt.Sprintf("%"+spec, n)
	case spec == "":
		return fmt.Sprintf("%.4f", x), nil
	default:
		v = fmt.Sprintf("%"+spec, x)
	}
	if strings.Contains(v, "%!") {
		what := "a metric, a number such as .2f or .3e"
		if name == "epoch" || name == "step" {
			what = name + ", an integer such as 03d"
		}
		return "", fmt.Errorf("{%s:%s} is no format for %s", name, spec, what)
	}
	return v, nil
}

func (c *ModelCheckpoint) StateDict() ([]byte, error) {
	c.st.Dirpath = c.dir
	return json.Marshal(c.st)
}

func (c *ModelCheckpoint) LoadStateDict(b []byte) error {
	var st ckptState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("ModelCheckpoint state: %w", err)
	}
	if st.Monitor != c.cfg.Monitor || st.Mode != c.cfg.Mode {
		// Another ranking: keep the files, start the ranking afresh.
		c.st.LastStep = st.LastStep
		return nil
	}
	if st.BestK == nil {
		st.BestK = map[string]jf{}
	}
	if st.Saved == nil {
		st.Saved = map[string]int{}
	}
	c.st = st
	return nil
}

// jf is a float64 that survives JSON when infinite or NaN.
type jf float64

func (f jf) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return json.Marshal(strconv.FormatFloat(v, 'g', -1, 64))
	}
	return json.Marshal(v)
}

func (f *jf) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := strconv.ParseFloat(s, 64)
		*f = jf(v)
		return err
	}
	var v float64
	err := json.Unmarshal(b, &v)
	*f = jf(v)
	return err
}

// bareNames lists, for an error that names the logged metrics, the bare
// names of those logged per step and per epoch (name_step and name_epoch),
// which Metrics.Get accepts too: "" when there are none.
func bareNames(m trainer.Metrics) string {
	var bare []string
	for _, n := range m.Names() {
		if b, ok := strings.CutSuffix(n, "_step"); ok {
			if _, both := m.Get(b + "_epoch"); both {
				bare = append(bare, b)
			}
		}
	}
	if len(bare) == 0 {
		return ""
	}
	return fmt.Sprintf(" (and %v, each the latest of its _step and _epoch values)", bare)
}

// noValidation explains a monitored metric that is missing from a Fit
// without validation, where a newcomer's val_loss never comes.
func noValidation(s *trainer.State) string {
	if s.Stage != "fit" || s.HasValidation {
		return ""
	}
	return "; this Fit has no validation loader, so no validation metric is logged: pass Fit one whose ValidationStep logs it, or monitor a training metric"
}
